"""Machine profiles: measured collective and kernel rates, stored as TOML. Pure (reads/writes files).

A profile (``perfmodel/machines/NAME.toml``) holds

* ``[machine]``: name, description, when/how it was measured, ``ranks`` (the P the collectives
  were measured at), ``dtype``;
* ``[alltoallv]``, ``[allreduce]``, ``[bcast]``: ``latency_s`` and ``bandwidth_Bps`` of the
  linear fit ``t = latency + bytes_per_rank / bandwidth``, plus the raw ``sizes``/``seconds``;
  ``[redistribute]`` the same fit for the engine's full layout change (pack + Alltoallv +
  merge) against the bytes a rank sends, when it was measured, with the measured points
  (``sizes``, ``seconds``): at the profile's P the time model interpolates between them
  (log-log; linear in bytes past the largest), because the cost is not linear in the size
  (caches);
* ``[spmm]``: ``widths`` and ``rate`` (nnz·width multiply-adds per second per rank) measured
  on a graph of ``nodes``/``nnz``;
* ``[gemm]``: ``widths`` (k = n grid) and ``rate`` (flops per second per rank) as a matrix
  ``rate[i][j]`` for k = widths[i], n = widths[j];
* ``[elementwise]``: ``rate`` (elements per second) of generic per-element work (optimiser,
  and every element-wise step when ``[engine_ops]`` is absent) and ``mask_rate`` (dropout
  masks drawn per second);
* ``[engine_ops]`` (optional): ``widths`` and, per element-wise operation of the engine
  (``perfmodel.engine_probe.ENGINE_OPS``: ``h0_dropout``, ``bias``, ``act``, ``loss``,
  ``mask_grad``, ``bgrad``, ``mask_pack``), ``rate_<op>`` — elements per second of the
  engine's own code on a rows × width tile, for each width.
"""
from __future__ import annotations

import math
import os
try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel.errors import PerfModelError

MACHINES = Path(__file__).resolve().parent / "machines"


@dataclass
class LinearCost:
    """``t = latency_s + bytes / bandwidth_Bps``."""

    latency_s: float
    bandwidth_Bps: float

    def time(self, nbytes: float, calls: int = 1) -> float:
        if calls <= 0:
            return 0.0
        return calls * self.latency_s + float(nbytes) / self.bandwidth_Bps


@dataclass
class Profile:
    """A calibrated machine (see the module docstring for the fields)."""

    name: str
    ranks: int
    alltoallv: LinearCost
    allreduce: LinearCost
    bcast: LinearCost
    spmm_widths: list[float]
    spmm_rate: list[float]
    gemm_widths: list[float]
    gemm_rate: list[list[float]]
    elementwise_rate: float
    gemm_rate_tn: list[list[float]] | None = None
    mask_rate: float = 0.0
    redistribute: LinearCost | None = None
    redistribute_points: tuple[list[float], list[float]] | None = None
    engine_op_widths: list[float] | None = None
    engine_op_rate: dict[str, list[float]] = field(default_factory=dict)
    description: str = ""
    path: str = ""
    raw: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ rates
    def spmm_time(self, nnz_width: float, width: int) -> float:
        """Seconds for a local SpMM of ``nnz_width`` multiply-adds at dense width ``width``."""
        if nnz_width <= 0 or width <= 0:
            return 0.0
        return nnz_width / _interp_log(self.spmm_widths, self.spmm_rate, width)

    def gemm_time(self, flops: float, k: int, n: int, tn: bool = False) -> float:
        """Seconds for a local GEMM of ``flops``: rows×k times k×n, or with ``tn`` the weight
        gradient (rows×k)ᵀ times rows×n (table ``rate_tn`` when measured)."""
        if flops <= 0:
            return 0.0
        table = self.gemm_rate_tn if tn and self.gemm_rate_tn else self.gemm_rate
        return flops / _interp_log2(self.gemm_widths, table, k, n)

    def elementwise_time(self, elems: float) -> float:
        return max(0.0, elems) / self.elementwise_rate

    def redistribute_time(self, nbytes: float, ranks: int) -> float:
        """Seconds of one engine redistribution sending ``nbytes`` from the busiest rank:
        interpolated between the measured points at the profile's P, else the linear fit
        extrapolated to ``ranks`` (:meth:`collective`)."""
        pts = self.redistribute_points
        if pts is None or ranks != self.ranks or nbytes <= 0:
            return self.collective("redistribute", ranks).time(nbytes)
        xs, ts = pts
        if nbytes >= xs[-1]:
            return ts[-1] * nbytes / xs[-1]
        if nbytes <= xs[0]:
            return ts[0]
        return float(np.exp(np.interp(math.log(nbytes), np.log(xs), np.log(ts))))

    def has_engine_op(self, op: str) -> bool:
        return bool(self.engine_op_widths) and op in self.engine_op_rate

    def engine_op_time(self, op: str, elems: float, width: int) -> float:
        """Seconds of the engine's element-wise operation ``op`` over ``elems`` elements of a
        tile ``width`` wide (``[engine_ops]``, interpolated in log width)."""
        if elems <= 0:
            return 0.0
        assert self.engine_op_widths is not None
        return elems / _interp_log(self.engine_op_widths, self.engine_op_rate[op],
                                   max(width, 1))

    def collective(self, kind: str, ranks: int) -> LinearCost:
        """The cost line of a collective at ``ranks`` (extrapolated from the measured P₀).

        Alltoallv latency scales with (P−1)/(P₀−1) (one exchange step per peer), tree
        collectives with log₂P/log₂P₀; the per-rank bandwidth is kept (a flat network; see
        README). The engine's redistribution keeps its measured local part (pack, merge, Python)
        and adds the Alltoallv latency growth.
        """
        base: LinearCost = getattr(self, kind)
        P0 = max(self.ranks, 2)
        if ranks <= 1:
            return LinearCost(0.0, math.inf)
        if kind == "alltoallv":
            return LinearCost(base.latency_s * (ranks - 1) / (P0 - 1), base.bandwidth_Bps)
        if kind == "redistribute":
            extra = self.alltoallv.latency_s * ((ranks - 1) / (P0 - 1) - 1.0)
            return LinearCost(max(base.latency_s + extra, 0.0), base.bandwidth_Bps)
        f = math.log2(ranks) / math.log2(P0)
        return LinearCost(base.latency_s * f, base.bandwidth_Bps)


def _interp_log(xs: list[float], ys: list[float], x: float) -> float:
    lx = np.log(np.asarray(xs, dtype=float))
    return float(np.exp(np.interp(math.log(x), lx, np.log(np.asarray(ys, dtype=float)))))


def _interp_log2(ws: list[float], table: list[list[float]], k: float, n: float) -> float:
    lw = np.log(np.asarray(ws, dtype=float))
    lt = np.log(np.asarray(table, dtype=float))
    col = np.array([np.interp(math.log(n), lw, row) for row in lt])
    return float(np.exp(np.interp(math.log(k), lw, col)))


def _linear(sec: dict[str, Any], where: str) -> LinearCost:
    try:
        lat = float(sec["latency_s"])
        bw = float(sec["bandwidth_Bps"])
    except (KeyError, TypeError, ValueError):
        raise PerfModelError(f"{where}: expected latency_s and bandwidth_Bps numbers") from None
    if lat < 0 or bw <= 0:
        raise PerfModelError(f"{where}: expected latency_s >= 0 and bandwidth_Bps > 0, "
                             f"got {lat}, {bw}")
    return LinearCost(lat, bw)


def _points(sec: dict[str, Any] | None, where: str) -> tuple[list[float], list[float]] | None:
    """Measured (sizes, seconds) of a section, sorted by size; None when absent."""
    if not sec or "sizes" not in sec or "seconds" not in sec:
        return None
    xs = [float(x) for x in sec["sizes"]]
    ts = [float(x) for x in sec["seconds"]]
    if len(xs) != len(ts) or not xs or min(xs) <= 0 or min(ts) <= 0:
        raise PerfModelError(f"{where}: expected equal-length positive sizes and seconds")
    order = np.argsort(xs)
    return [xs[i] for i in order], [ts[i] for i in order]


def resolve_profile_path(name: str | os.PathLike) -> Path:
    """A profile file: an existing path, or NAME / NAME.toml under perfmodel/machines/."""
    p = Path(name)
    if p.exists():
        if p.is_dir():
            raise PerfModelError(f"{p}: expected a machine profile .toml file, got a directory")
        return p
    for cand in (MACHINES / str(name), MACHINES / f"{name}.toml"):
        if cand.is_file():
            return cand
    have = ", ".join(sorted(x.stem for x in MACHINES.glob("*.toml"))) or "none"
    raise PerfModelError(f"{p}: no such machine profile (expected a .toml file or one of the "
                         f"bundled profiles: {have})")


def load_profile(name: str | os.PathLike) -> Profile:
    """Read and validate a machine profile (path or bundled name)."""
    p = resolve_profile_path(name)
    try:
        raw = tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PerfModelError(f"{p}: not valid TOML ({exc})") from None
    try:
        m = raw["machine"]
        spmm, gemm = raw["spmm"], raw["gemm"]
        prof = Profile(
            name=str(m.get("name", p.stem)), ranks=int(m["ranks"]),
            alltoallv=_linear(raw["alltoallv"], f"{p}:[alltoallv]"),
            allreduce=_linear(raw["allreduce"], f"{p}:[allreduce]"),
            bcast=_linear(raw["bcast"], f"{p}:[bcast]"),
            spmm_widths=[float(x) for x in spmm["widths"]],
            spmm_rate=[float(x) for x in spmm["rate"]],
            gemm_widths=[float(x) for x in gemm["widths"]],
            gemm_rate=[[float(x) for x in row] for row in gemm["rate"]],
            gemm_rate_tn=([[float(x) for x in row] for row in gemm["rate_tn"]]
                          if "rate_tn" in gemm else None),
            elementwise_rate=float(raw["elementwise"]["rate"]),
            mask_rate=float(raw["elementwise"].get("mask_rate", 0.0))
            or float(raw["elementwise"]["rate"]) / 4,
            redistribute=(_linear(raw["redistribute"], f"{p}:[redistribute]")
                          if "redistribute" in raw else None),
            redistribute_points=_points(raw.get("redistribute"), f"{p}:[redistribute]"),
            engine_op_widths=([float(x) for x in raw["engine_ops"]["widths"]]
                              if "engine_ops" in raw else None),
            engine_op_rate=({k[5:]: [float(x) for x in v] for k, v in raw["engine_ops"].items()
                             if k.startswith("rate_")} if "engine_ops" in raw else {}),
            description=str(m.get("description", "")), path=str(p), raw=raw)
    except KeyError as exc:
        raise PerfModelError(f"{p}: missing key {exc} (expected a profile written by "
                             f"`shardgnn-perfmodel calibrate`)") from None
    except (TypeError, ValueError) as exc:
        raise PerfModelError(f"{p}: bad value ({exc})") from None
    if prof.gemm_rate_tn is not None and (len(prof.gemm_rate_tn) != len(prof.gemm_widths) or any(
            len(r) != len(prof.gemm_widths) for r in prof.gemm_rate_tn)):
        raise PerfModelError(f"{p}:[gemm]: expected rate_tn with the shape of rate")
    if len(prof.spmm_widths) != len(prof.spmm_rate) or not prof.spmm_rate:
        raise PerfModelError(f"{p}:[spmm]: expected equal-length non-empty widths and rate")
    g = len(prof.gemm_widths)
    if g == 0 or len(prof.gemm_rate) != g or any(len(r) != g for r in prof.gemm_rate):
        raise PerfModelError(f"{p}:[gemm]: expected a {g}x{g} rate matrix")
    for op, rates in prof.engine_op_rate.items():
        if len(rates) != len(prof.engine_op_widths or []) or min(rates, default=1.0) <= 0:
            raise PerfModelError(f"{p}:[engine_ops]: expected rate_{op} with one positive rate "
                                 f"per width")
    if min(prof.spmm_rate + [x for r in prof.gemm_rate for x in r]) <= 0 \
            or prof.elementwise_rate <= 0:
        raise PerfModelError(f"{p}: expected positive rates")
    return prof


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, np.generic):
        return _toml_value(v.item())
    raise TypeError(f"cannot write {type(v)!r} to TOML")


def dumps_profile(data: dict[str, dict[str, Any]], header: str = "") -> str:
    """Serialise ``{section: {key: value}}`` (scalars and flat/nested lists) as TOML."""
    lines = [f"# {x}" for x in header.splitlines()] if header else []
    for sec, body in data.items():
        lines.append("")
        lines.append(f"[{sec}]")
        for k, v in body.items():
            if isinstance(v, dict):
                raise TypeError("nested tables are not used in profiles")
            lines.append(f"{k} = {_toml_value(v)}")
    return "\n".join(lines).lstrip("\n") + "\n"


def write_profile(path: str | os.PathLike, data: dict[str, dict[str, Any]],
                  header: str = "") -> Path:
    """Write a profile atomically (temp file, then rename); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = dumps_profile(data, header)
    tomllib.loads(text)  # refuse to write something we cannot read back
    tmp = p.with_name(f"{p.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, p)
    return p
