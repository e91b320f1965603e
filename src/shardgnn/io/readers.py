"""Chunked edge sources for `shardgnn convert`: text/CSV, Matrix Market, .npy/.npz, arrays, R-MAT.

Every source yields :class:`EdgeChunk` objects of bounded size and can be iterated more than
once (convert makes two passes). Parse errors are :class:`ShardError` naming the file and the
line (text) or byte offset (binary). Rank-local: nothing here communicates.
"""
from __future__ import annotations

import gzip
import zlib
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

import numpy as np

from shardgnn.errors import input_error

#: File name endings understood by ``convert`` and the format each maps to.
EXTENSIONS = {
    ".txt": "snap", ".edges": "snap", ".tsv": "snap", ".el": "snap", ".edgelist": "snap",
    ".csv": "csv", ".mtx": "mtx", ".npy": "npy", ".npz": "npz", ".toml": "toml",
}
#: Formats named by --format / a descriptor that are not file extensions (folders).
FOLDER_FORMATS = ("planetoid", "recbole", "ogb")
TEXT_FORMATS = ("snap", "csv", "mtx")
DEFAULT_CHUNK_EDGES = 1 << 22


@dataclass
class EdgeChunk:
    """A bounded slice of a source: int64 (k, 2) edges, optional int32 types, and locations."""

    edges: np.ndarray
    types: np.ndarray | None
    path: Path
    lines: np.ndarray | None = None
    row0: int = 0
    byte0: int = 0
    row_bytes: int = 0
    weights: np.ndarray | None = None

    def where(self, i: int) -> str:
        """Location of edge ``i`` of this chunk, for error messages."""
        if self.lines is not None:
            return f"line {int(self.lines[i])}"
        if self.row_bytes:
            return f"byte {self.byte0 + (self.row0 + i) * self.row_bytes}"
        return f"edge {self.row0 + i}"


class EdgeSource:
    """Base class: a re-iterable sequence of :class:`EdgeChunk`."""

    path: Path = Path("")
    declared_nodes: int | None = None
    has_types: bool = False
    has_weights: bool = False
    symmetric: bool = False
    name: str = ""
    #: edge count the input declares (OGB's num-edge-list); convert checks it after pass 1
    declared_edges: int | None = None

    def chunks(self) -> Iterator[EdgeChunk]:
        """Yield the source's edge chunks in file order (each reader implements this)."""
        raise TypeError(f"{type(self).__name__} must implement chunks()")


def _open_bytes(path: Path) -> IO[bytes]:
    """Open a file for binary reading, transparently gunzipping gzip data."""
    fh = open(path, "rb")
    magic = fh.read(2)
    fh.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
    return fh


def detect_format(path: Path) -> str:
    """Format name from the file name (``.gz`` stripped), or a one-line ShardError."""
    name = path.name.lower()
    if path.is_dir():
        from shardgnn.io.ogb import is_ogb_dir
        from shardgnn.io.recbole import is_recbole_dir

        if is_ogb_dir(path):
            return "ogb"
        return "recbole" if is_recbole_dir(path) else "planetoid"
    if name.endswith(".gz"):
        name = name[:-3]
    for ext, fmt in EXTENSIONS.items():
        if name.endswith(ext):
            return fmt
    if "ind." in name and Path(str(path) + ".graph").exists():
        return "planetoid"
    known = ", ".join(sorted(EXTENSIONS)) + " (text ones also .gz), a Planetoid, RecBole or OGB folder"
    raise input_error(path, f"unknown file extension (expected one of {known}; "
                      "or name the format with --format)")


class TextSource(EdgeSource):
    """Whitespace/tab/comma separated integer edge lists (SNAP), CSV with a header, and MTX bodies.

    Lines starting with ``#`` or ``%`` are comments; CRLF is accepted. Every data line must have
    the column count of the first data line; the first two columns are ids, an optional third
    integer column is the edge type (``edge_types``); the next column, when the first data line
    has one holding a decimal number, is the edge weight (``weights=True``; ``False`` ignores
    it; a Matrix Market ``real``/``integer`` value is the weight); further columns are ignored.
    """

    def __init__(self, path: str | os.PathLike, fmt: str = "snap", edge_types: bool = False,
                 chunk_edges: int = DEFAULT_CHUNK_EDGES, chunk_bytes: int | None = None,
                 weights: bool = True) -> None:
        self.path = Path(path)
        self.fmt = fmt
        self.has_types = edge_types
        self.chunk_bytes = int(chunk_bytes or max(64, min(chunk_edges * 16, 1 << 24)))
        self.header: list[str] = []
        self.name = self.path.name.split(".")[0]
        self.one_based = False
        self._skip_lines = 0
        _check_readable(self.path)
        self.mtx_values = False
        if fmt == "mtx":
            self._read_mtx_header()
        elif fmt == "csv":
            self._detect_header()
        self.has_weights = bool(weights) and self._weight_column()

    def _weight_column(self) -> bool:
        """Whether the first data line has a decimal number after the ids (and type)."""
        if self.fmt == "mtx":
            return self.mtx_values
        first = self._first_data_line(self._skip_lines)
        if first is None:
            return False
        toks = [t for t in first[1].decode("utf-8", "replace").replace("\t", ",")
                .replace(";", ",").replace(" ", ",").strip().split(",") if t]
        k = 3 if self.has_types else 2
        if len(toks) <= k:
            return False
        try:
            return bool(np.isfinite(float(toks[k])))
        except ValueError:
            return False

    # -- headers
    def _first_data_line(self, after: int = 0) -> tuple[int, bytes] | None:
        """(line number, raw bytes) of the first non-blank, non-comment line after line
        ``after``."""
        with _open_bytes(self.path) as fh:
            for no, raw in enumerate(fh, 1):
                s = raw.strip()
                if no > after and s and not s.startswith((b"#", b"%")):
                    return no, raw
        return None

    def _detect_header(self) -> None:
        first = self._first_data_line()
        if first is None:
            return
        no, raw = first
        toks = [t for t in raw.decode("utf-8", "replace").replace("\t", ",").replace(";", ",")
                .replace(" ", ",").strip().split(",") if t]
        if not all(t.lstrip("+").isdigit() for t in toks[:2]):
            self.header = toks
            self._skip_lines = no

    def _read_mtx_header(self) -> None:
        with _open_bytes(self.path) as fh:
            first = fh.readline()
            if not first:
                raise input_error(self.path, "empty file (expected a Matrix Market header)", "line 1")
            banner = first.decode("ascii", "replace").strip().lower().split()
            if len(banner) < 5 or banner[0] != "%%matrixmarket" or banner[1] != "matrix":
                raise input_error(self.path, "expected a '%%MatrixMarket matrix coordinate ...' "
                                  f"header, got {first[:60]!r}", "line 1")
            if banner[2] != "coordinate":
                raise input_error(self.path, f"expected a coordinate (sparse) matrix, got "
                                  f"{banner[2]!r}", "line 1")
            self.symmetric = banner[4] in ("symmetric", "skew-symmetric", "hermitian")
            self.mtx_values = banner[3] in ("real", "integer", "double")
            no = 1
            for raw in fh:
                no += 1
                s = raw.strip()
                if not s or s.startswith(b"%"):
                    continue
                parts = s.split()
                try:
                    rows, cols, nnz = (int(p) for p in parts[:3])
                except ValueError:
                    raise input_error(self.path, f"expected a size line 'rows cols nnz', got "
                                      f"{s[:60]!r}", f"line {no}") from None
                self.declared_nodes = max(rows, cols)
                self.nnz = nnz
                self._skip_lines = no
                self.one_based = True
                return
        raise input_error(self.path, "Matrix Market file has no size line", f"line {no}")

    # -- chunks
    def _raw_blocks(self) -> Iterator[tuple[bytes, int]]:
        """Yield (bytes of whole lines, number of lines before them); a truncated or corrupt
        gzip stream is a ShardError naming the file and the line reached."""
        line0 = 0
        try:
            for block, line0 in self._read_blocks():
                yield block, line0
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise input_error(self.path, f"truncated or corrupt gzip data ({exc}); expected a "
                              "complete .gz file", f"after line {line0}") from None

    def _read_blocks(self) -> Iterator[tuple[bytes, int]]:
        with _open_bytes(self.path) as fh:
            line0 = 0
            if self._skip_lines:
                for _ in range(self._skip_lines):
                    fh.readline()
                line0 = self._skip_lines
            carry = b""
            if not self._skip_lines and fh.read(3) != b"\xef\xbb\xbf":   # UTF-8 byte order mark
                fh.seek(0)
            while True:
                data = fh.read(self.chunk_bytes)
                if not data:
                    if carry:
                        yield carry, line0
                    return
                data = carry + data
                cut = data.rfind(b"\n")
                if cut < 0:
                    carry = data
                    continue
                block, carry = data[: cut + 1], data[cut + 1:]
                yield block, line0
                line0 += block.count(b"\n")

    def chunks(self) -> Iterator[EdgeChunk]:
        from shardgnn.io.textparse import parse_block   # numba: imported when text is parsed

        nparse = 3 if self.has_types else 2
        ncols = 0
        seen = 0
        for block, line0 in self._raw_blocks():
            buf = np.frombuffer(block, dtype=np.uint8)
            cap = block.count(b"\n") + 1
            out = np.empty((cap, nparse), dtype=np.int64)
            lines = np.empty(cap, dtype=np.int64)
            wout = np.zeros(cap if self.has_weights else 1, dtype=np.float64)
            rows, _, ncols, err, eline, eval_ = parse_block(
                buf, nparse, ncols, out, lines, line0, nparse if self.has_weights else -1, wout)
            if err:
                self._raise(err, eline, eval_, ncols, block, line0)
            if rows and self.has_types and ncols < 3:
                raise input_error(self.path, f"--edge-types: expected a third integer column "
                                  f"(edge type), got {ncols} columns", f"line {int(lines[0])}")
            e = out[:rows, :2]
            if self.one_based:
                bad = np.flatnonzero((e < 1).any(axis=1))
                if bad.size:
                    raise input_error(self.path, "expected 1-based indices >= 1 in a Matrix "
                                      "Market file, got 0", f"line {int(lines[bad[0]])}")
                e = e - 1
            seen += rows
            types = out[:rows, 2].astype(np.int32) if self.has_types else None
            if types is not None and rows and int(out[:rows, 2].max()) > np.iinfo(np.int32).max:
                i = int(np.argmax(out[:rows, 2]))
                raise input_error(self.path, "edge type does not fit int32", f"line {int(lines[i])}")
            if self.has_weights and rows and ncols <= nparse:
                raise input_error(self.path, f"expected a weight column after the ids like the "
                                  f"first data line, got {ncols} columns", f"line {int(lines[0])}")
            w = wout[:rows].astype(np.float32) if self.has_weights else None
            yield EdgeChunk(e, types, self.path, lines=lines[:rows].copy(), weights=w)
        if self.fmt == "mtx" and seen != self.nnz:
            raise input_error(self.path, f"expected {self.nnz} entries from the size line, "
                              f"got {seen} (truncated file?)", f"line {self._skip_lines}")

    def _raise(self, err: int, line: int, val: int, ncols: int, block: bytes, line0: int) -> None:
        text = block.split(b"\n")[line - line0 - 1][:80].decode("utf-8", "replace").rstrip("\r")
        if err == 1:
            msg = (f"expected {ncols} columns like the first data line, got {val} "
                   f"columns: {text!r}")
        elif err == 2:
            msg = f"negative node id in column {val + 1} (expected ids >= 0): {text!r}"
        elif err == 3:
            what = "edge type" if val == 2 else "node id"
            msg = f"expected an integer {what} in column {val + 1}, got {text!r}"
        elif err == 4:
            msg = f"integer in column {val + 1} is too large (expected < 10^18): {text!r}"
        elif err == 6:
            msg = (f"expected a finite decimal edge weight in column {val + 1} (like the first "
                   f"data line; --no-weights ignores the column), got {text!r}")
        else:
            msg = f"expected at least 2 columns (src dst), got {val}: {text!r}"
        raise input_error(self.path, msg, f"line {line}")


def _check_readable(path: Path) -> None:
    if not path.exists():
        raise input_error(path, "no such file")
    if path.is_dir():
        raise input_error(path, "expected a file, got a directory")
    if path.stat().st_size == 0:
        raise input_error(path, "empty file (expected edges)", "byte 0")


# ----------------------------------------------------------------------------- binary arrays
def read_npy_header(fh: IO[bytes], path: str | os.PathLike
                    ) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, fortran_order, dtype, data offset in bytes) of an .npy stream positioned at its
    start; a bad header is a one-line error naming ``path``. The one .npy header parser."""
    try:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
    except (ValueError, OSError) as exc:
        raise input_error(path, f"not a valid .npy array ({exc})", "byte 0") from None
    return tuple(shape), bool(fortran), np.dtype(dtype), fh.tell()


def npy_header(path: str | os.PathLike) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """:func:`read_npy_header` of the file at ``path``. Rank-local."""
    with open(path, "rb") as fh:
        return read_npy_header(fh, path)


def _check_int_dtype(dt: np.dtype, path: Path, what: str) -> None:
    if dt.kind not in "iu":
        raise input_error(path, f"expected an integer {what} array, got dtype {dt}")


#: Field-name pairs of the endpoints in a structured ``.npy`` edge array.
ID_FIELDS = (("src", "dst"), ("u", "v"), ("row", "col"), ("source", "target"))


def _structured_fields(dt: np.dtype, path: Path) -> tuple[str, str, str | None]:
    """(src field, dst field, weight field or None) of a structured edge dtype."""
    names = dt.names or ()
    fields: dict[str, Any] = dict(dt.fields or {})
    for a, b in ID_FIELDS:
        if a in names and b in names:
            for f in (a, b):
                _check_int_dtype(fields[f][0], path, f"field {f!r} of the edge")
            w = "weight" if "weight" in names else None
            if w is not None and fields[w][0].kind not in "iufb":
                raise input_error(path, f"field 'weight': expected numbers, got {fields[w][0]}")
            return a, b, w
    raise input_error(path, f"expected a structured array with fields src/dst (or u/v, row/col, "
                      f"source/target) and optionally weight, got fields {list(names)}")


class NpySource(EdgeSource):
    """An (m, 2) integer ``.npy`` edge array, or (m, 3) whose third column is the edge weight,
    or a structured (m,) array with fields ``src``, ``dst`` and optionally ``weight`` (weights
    ignored with ``weights=False``), read in chunks."""

    def __init__(self, path: str | os.PathLike, chunk_edges: int = DEFAULT_CHUNK_EDGES,
                 weights: bool = True) -> None:
        self.path = Path(path)
        self.name = self.path.stem
        self.chunk = int(chunk_edges)
        _check_readable(self.path)
        with open(self.path, "rb") as fh:
            shape, fortran, dt, off = read_npy_header(fh, self.path)
        self.fields = None
        if dt.names:
            self.fields = _structured_fields(dt, self.path)
            if len(shape) != 1:
                raise input_error(self.path, f"expected a 1-D structured edge array, got {shape}")
            shape = (shape[0], 1)
        else:
            _check_int_dtype(dt, self.path, "edge")
        if len(shape) != 2 or shape[1] not in (1, 2, 3) or (shape[1] == 1 and not self.fields):
            raise input_error(self.path, f"expected an (m, 2) edge array, got shape {shape}")
        self.m, self.cols, self.dtype, self.offset = shape[0], shape[1], dt, off
        self.fortran = fortran
        self.has_weights = bool(weights) and (self.cols == 3 or bool(
            self.fields and self.fields[2]))
        need = self.m * self.cols * dt.itemsize
        have = self.path.stat().st_size - off
        if have != need:
            row = self.cols * dt.itemsize
            raise input_error(self.path, f"truncated binary: data holds {have} bytes, expected "
                              f"{need} for shape {shape} {dt} (size not a multiple of the "
                              f"{row}-byte edge size)" if have % row else
                              f"truncated binary: data holds {have} bytes, expected {need} for "
                              f"shape {shape} {dt}", f"byte {off + have - have % row}")

    def chunks(self) -> Iterator[EdgeChunk]:
        """Chunks read with plain file reads (C order) so resident memory stays one chunk."""
        if self.m == 0:
            return
        row_bytes = self.cols * self.dtype.itemsize
        if self.fortran:
            mm = np.memmap(self.path, dtype=self.dtype, mode="r", offset=self.offset,
                           shape=(self.m, self.cols), order="F")
            blocks: Iterator[tuple[int, np.ndarray]] = (
                (lo, np.array(mm[lo:lo + self.chunk]))
                for lo in range(0, self.m, self.chunk))
        else:
            blocks = self._c_blocks()
        for lo, raw in blocks:
            if self.fields:
                rec = raw[:, 0]
                e = np.column_stack([rec[self.fields[0]], rec[self.fields[1]]]).astype(np.int64)
            else:
                e = raw[:, :2].astype(np.int64)
            _check_nonneg(e, self.path, lambda i, lo=lo: f"byte {self.offset + (lo + i) * row_bytes}")
            w = None
            if self.has_weights:
                w = (rec[self.fields[2]] if self.fields else raw[:, 2]).astype(np.float32)
                _check_weights(w, self.path, lambda i, lo=lo: f"byte {self.offset + (lo + i) * row_bytes}")
            yield EdgeChunk(e, None, self.path, row0=lo, byte0=self.offset, row_bytes=row_bytes,
                            weights=w)

    def _c_blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            for lo in range(0, self.m, self.chunk):
                k = min(self.chunk, self.m - lo)
                yield lo, np.fromfile(fh, dtype=self.dtype, count=k * self.cols).reshape(k, self.cols)


def _check_weights(w: np.ndarray, path: Path, where) -> None:
    """Edge weights must be finite (float32)."""
    bad = ~np.isfinite(w)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise input_error(path, f"non-finite edge weight {w[i]} (expected finite numbers "
                          "that fit float32)", where(i))


def _check_nonneg(e: np.ndarray, path: Path, where) -> None:
    if e.size and e.min() < 0:
        i = int(np.flatnonzero((e < 0).any(axis=1))[0])
        raise input_error(path, f"negative node id {int(e[i].min())} (expected ids >= 0)", where(i))


class NpzSource(EdgeSource):
    """An ``.npz`` archive with ``edges`` (m, 2) or ``row`` and ``col`` (m,) integer arrays, and
    optionally ``weight`` (m,) numbers (the edge weights; ignored with ``weights=False``).

    Members are streamed from the (possibly compressed) zip in chunks; nothing is loaded whole.
    """

    def __init__(self, path: str | os.PathLike, chunk_edges: int = DEFAULT_CHUNK_EDGES,
                 weights: bool = True) -> None:
        self.path = Path(path)
        self.name = self.path.stem
        self.chunk = int(chunk_edges)
        _check_readable(self.path)
        import zipfile   # here: only .npz edge lists need it

        try:
            with zipfile.ZipFile(self.path) as zf:
                names = set(zf.namelist())
                self.infos = {n: zf.getinfo(n) for n in names}
        except zipfile.BadZipFile as exc:
            raise input_error(self.path, f"not a valid .npz archive ({exc})") from None
        if "edges.npy" in names:
            self.members = ["edges.npy"]
        elif {"row.npy", "col.npy"} <= names:
            self.members = ["row.npy", "col.npy"]
        else:
            got = sorted(n[:-4] for n in names)
            raise input_error(self.path, f"expected arrays 'edges' or 'row' and 'col' (or the "
                              f"CSR keys 'adj_matrix.indptr', ...), got {got}")
        self.has_weights = bool(weights) and "weight.npy" in names
        self.shapes = []
        for mname in self.members + (["weight.npy"] if self.has_weights else []):
            with zipfile.ZipFile(self.path) as zf, zf.open(mname) as fh:
                shape, fortran, dt, off = read_npy_header(fh, self.path)
            if mname == "weight.npy":
                if dt.kind not in "iufb":
                    raise input_error(self.path, f"weight: expected a numeric array, got {dt}")
            else:
                _check_int_dtype(dt, self.path, mname[:-4])
            if fortran and len(shape) > 1:
                raise input_error(self.path, f"{mname}: expected a C-ordered array")
            need = int(np.prod(shape)) * dt.itemsize
            have = self.infos[mname].file_size - off
            if have != need:
                raise input_error(self.path, f"{mname}: truncated binary: holds {have} bytes, "
                                  f"expected {need} for shape {shape} {dt}", f"byte {off + have}")
            self.shapes.append((shape, dt, off))
        if self.members == ["edges.npy"]:
            shape = self.shapes[0][0]
            if len(shape) != 2 or shape[1] != 2:
                raise input_error(self.path, f"expected 'edges' of shape (m, 2), got {shape}")
            self.m = shape[0]
        else:
            (rs, _, _), (cs, _, _) = self.shapes[:2]
            if len(rs) != 1 or rs != cs:
                raise input_error(self.path, f"expected 'row' and 'col' of equal 1-D shape, "
                                  f"got {rs} and {cs}")
            self.m = rs[0]
        if self.has_weights and self.shapes[-1][0] != (self.m,):
            raise input_error(self.path, f"weight: expected shape ({self.m},) (one per edge), "
                              f"got {self.shapes[-1][0]}")

    def chunks(self) -> Iterator[EdgeChunk]:
        import zipfile

        with zipfile.ZipFile(self.path) as zf:
            members = self.members + (["weight.npy"] if self.has_weights else [])
            fhs = [zf.open(mname) for mname in members]
            try:
                for fh, (_, _, off) in zip(fhs, self.shapes):
                    fh.read(off)
                width = 2 if len(self.members) == 1 else 1
                for lo in range(0, self.m, self.chunk):
                    k = min(self.chunk, self.m - lo)
                    cols = []
                    for fh, (_, dt, _) in zip(fhs[:len(self.members)], self.shapes):
                        raw = _read_exact(fh, k * width * dt.itemsize)
                        cols.append(np.frombuffer(raw, dtype=dt).astype(np.int64).reshape(k, width))
                    e = np.concatenate(cols, axis=1) if width == 1 else cols[0]
                    _check_nonneg(e, self.path, lambda i, lo=lo: f"edge {lo + i}")
                    w = None
                    if self.has_weights:
                        dt = self.shapes[-1][1]
                        w = np.frombuffer(_read_exact(fhs[-1], k * dt.itemsize),
                                          dtype=dt).astype(np.float32)
                        _check_weights(w, self.path, lambda i, lo=lo: f"edge {lo + i}")
                    yield EdgeChunk(e, None, self.path, row0=lo, weights=w)
            finally:
                for fh in fhs:
                    fh.close()


def _skip(fh: IO[bytes], n: int, block: int = 1 << 18) -> None:
    """Read past ``n`` bytes a block at a time (a zip member's own seek reads up to 16 MiB at
    once)."""
    while n > 0:
        got = len(fh.read(min(block, n)))
        if not got:
            raise EOFError(f"{n} bytes short of the position")
        n -= got


def _read_exact(fh: IO[bytes], n: int) -> bytes:
    buf = io.BytesIO()
    while buf.tell() < n:
        part = fh.read(n - buf.tell())
        if not part:
            break
        buf.write(part)
    return buf.getvalue()


class NpzArray:
    """One array of an ``.npz`` archive (compressed or not) read as a stream: its header is
    checked on construction and :meth:`items` yields bounded blocks of its flat data, so nothing
    is loaded whole. Rank-local.

    Parameters
    ----------
    path
        The archive.
    name
        The array's name in it (the member ``NAME.npy``).
    """

    def __init__(self, path: str | os.PathLike, name: str) -> None:
        import zipfile   # here: only .npz inputs need it

        self.path, self.name = Path(path), name
        _check_readable(self.path)
        try:
            with zipfile.ZipFile(self.path) as zf:
                names = set(zf.namelist())
                if f"{name}.npy" not in names:
                    got = sorted(n[:-4] for n in names if n.endswith(".npy"))
                    raise input_error(self.path, f"expected an array {name!r}, got {got}")
                size = zf.getinfo(f"{name}.npy").file_size
                with zf.open(f"{name}.npy") as fh:
                    shape, fortran, dt, off = read_npy_header(fh, self.path)
        except zipfile.BadZipFile as exc:
            raise input_error(self.path, f"not a valid .npz archive ({exc})") from None
        if dt.hasobject or dt.names:
            raise input_error(self.path, f"{name}: expected a numeric array, got dtype {dt}")
        self.shape, self.fortran, self.dtype, self.offset = shape, fortran, dt, off
        self.size = int(np.prod(shape)) if shape else 1
        if size - off != self.size * dt.itemsize:
            raise input_error(self.path, f"{name}: truncated binary: holds {size - off} bytes, "
                              f"expected {self.size * dt.itemsize} for shape {shape} {dt}")

    def items(self, block: int, start: int = 0, stop: int | None = None) -> Iterator[np.ndarray]:
        """Flat items ``[start, stop)`` in storage order (C order, or F order when the member
        is Fortran-ordered), ``block`` at a time."""
        import zipfile

        stop = self.size if stop is None else stop
        item = self.dtype.itemsize
        try:
            with zipfile.ZipFile(self.path) as zf, zf.open(f"{self.name}.npy") as fh:
                _skip(fh, self.offset + start * item)
                for lo in range(start, stop, max(1, int(block))):
                    k = min(int(block), stop - lo)
                    yield np.frombuffer(_read_exact(fh, k * item), dtype=self.dtype, count=k)
        except (EOFError, zipfile.BadZipFile, zlib.error, ValueError) as exc:
            raise input_error(self.path, f"{self.name}: truncated or corrupt data ({exc})") from None

    def rows(self, block_rows: int) -> Iterator[np.ndarray]:
        """Blocks of at most ``block_rows`` rows of a C-ordered array (1-D: values)."""
        if self.fortran and len(self.shape) > 1:
            raise input_error(self.path, f"{self.name}: expected a C-ordered array, got a "
                              "Fortran-ordered one")
        width = int(np.prod(self.shape[1:])) if len(self.shape) > 1 else 1
        for flat in self.items(max(1, int(block_rows)) * width):
            yield flat.reshape((-1,) + tuple(self.shape[1:]))

    def read(self) -> np.ndarray:
        """The whole array (for small members only: counts, lists)."""
        flat = np.concatenate(list(self.items(max(1, self.size)))) if self.size else \
            np.zeros(0, self.dtype)
        return flat.reshape(self.shape, order="F" if self.fortran else "C")


class EdgeIndexNpzSource(EdgeSource):
    """A ``(2, m)`` integer edge array in an ``.npz`` (PyG's / OGB's ``edge_index``), streamed:
    a C-ordered array is read through two positions of the member at once (its row of sources
    and its row of targets), a Fortran-ordered one as interleaved pairs; each chunk holds at
    most ``chunk_edges`` edges (:attr:`max_chunk` records the largest served)."""

    def __init__(self, path: str | os.PathLike, name: str = "edge_index",
                 chunk_edges: int = DEFAULT_CHUNK_EDGES, declared_nodes: int | None = None,
                 declared_edges: int | None = None) -> None:
        self.array = NpzArray(path, name)
        self.path = Path(path)
        self.name = self.path.parent.parent.name if self.path.parent.name == "raw" else \
            self.path.stem
        shape = self.array.shape
        if len(shape) != 2 or shape[0] != 2:
            raise input_error(self.path, f"{name}: expected shape (2, m), got {shape}")
        _check_int_dtype(self.array.dtype, self.path, name)
        self.m = int(shape[1])
        self.chunk = int(chunk_edges)
        self.declared_nodes = declared_nodes
        self.declared_edges = declared_edges
        self.max_chunk = 0

    def chunks(self) -> Iterator[EdgeChunk]:
        a, m, k = self.array, self.m, self.chunk
        if a.fortran:   # (2, m) in F order = (m, 2) pairs in C order
            pairs: Iterator[np.ndarray] = (f.reshape(-1, 2) for f in a.items(2 * k))
        else:
            pairs = (np.stack([u, v], axis=1) for u, v in
                     zip(a.items(k, 0, m), a.items(k, m, 2 * m)))
        lo = 0
        for e in pairs:
            e = e.astype(np.int64)
            _check_nonneg(e, self.path, lambda i, lo=lo: f"edge {lo + i}")
            self.max_chunk = max(self.max_chunk, int(e.shape[0]))
            yield EdgeChunk(e, None, self.path, row0=lo)
            lo += e.shape[0]


# ----------------------------------------------------------------------------- in-memory / generated
class ArraySource(EdgeSource):
    """Edges already in memory (Planetoid graphs, tests), served in chunks."""

    def __init__(self, edges: np.ndarray, path: str | os.PathLike = "<array>",
                 declared_nodes: int | None = None, types: np.ndarray | None = None,
                 chunk_edges: int = DEFAULT_CHUNK_EDGES, name: str = "",
                 weights: np.ndarray | None = None) -> None:
        self.edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        self.types = None if types is None else np.asarray(types, dtype=np.int32)
        self.has_types = self.types is not None
        self.weights = None if weights is None else np.asarray(weights, dtype=np.float32)
        self.has_weights = self.weights is not None
        self.path = Path(path)
        self.declared_nodes = declared_nodes
        self.chunk = int(chunk_edges)
        self.name = name
        _check_nonneg(self.edges, self.path, lambda i: f"edge {i}")

    def chunks(self) -> Iterator[EdgeChunk]:
        for lo in range(0, self.edges.shape[0], self.chunk):
            t = None if self.types is None else self.types[lo:lo + self.chunk]
            w = None if self.weights is None else self.weights[lo:lo + self.chunk]
            yield EdgeChunk(self.edges[lo:lo + self.chunk], t, self.path, row0=lo, weights=w)


class RMATSource(EdgeSource):
    """R-MAT edges generated on the fly (no file): ``shardgnn generate rmat --canonical``."""

    def __init__(self, scale: int, num_edges: int, seed: int = 0,
                 abc: tuple[float, float, float] = (0.57, 0.19, 0.19), permute: bool = True,
                 chunk_edges: int = DEFAULT_CHUNK_EDGES) -> None:
        from shardgnn.graph.generators import _check_rmat, rmat_permutation

        _check_rmat(scale, num_edges, abc)
        self.scale, self.m, self.seed, self.abc = scale, int(num_edges), seed, abc
        self.permute = permute
        self.chunk = int(chunk_edges)
        self.declared_nodes = 1 << scale
        self.path = Path(f"<rmat scale={scale} edges={num_edges} seed={seed}>")
        self.name = f"rmat-{scale}"
        self._perm = rmat_permutation(scale, seed) if permute else None

    def chunks(self) -> Iterator[EdgeChunk]:
        from shardgnn.graph.generators import rmat_edges

        for lo in range(0, self.m, self.chunk):
            e = rmat_edges(self.scale, self.m, self.seed, lo, lo + self.chunk, self.abc,
                           self._perm, self.permute)
            yield EdgeChunk(e, None, self.path, row0=lo)
