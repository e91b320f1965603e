"""No option given and ignored (issue 34): every option of every command, and of every training
engine, run on a tiny input either takes effect or is refused.

The test walks the parsers (every subcommand, every generator, every option each train engine
accepts) and requires an entry in :data:`AUDIT` for each, so a new option fails here until it
is audited. Each entry runs the command in-process (one rank; the distributed paths have their
own MPI tests) with a base command line plus the option and checks one of:

- ``changes``: exit 0 and the command's output differs from the base run's (a digest of what it
  writes: dataset arrays, partition contents, training curves, samples, embeddings, printed
  text). This proves the option took effect.
- ``records``: exit 0 and the value is where the command records what it used (``/config`` or
  ``/train`` attributes, ``meta.json`` params, ``graph.json``), and, for options that must not
  change results (performance knobs, formats), the output equals the base run's. Used where an
  effect is not visible on a tiny input or is excluded by design.
- ``refused``: in a context where the option would have no effect it exits 2 with a line that
  names it (``--X: applies only ...``).
- a dedicated check (a function) for options whose effect is a file or a behaviour (``--out``,
  ``--checkpoint``, ``--resume``, ``--force``, ``--plot``, ...).

An option may have several entries (e.g. ``changes`` where it applies, ``refused`` where not).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import h5py
import numpy as np
import pytest

from conftest import ROOT
from shardgnn.cli.main import build_parser, main

VOLATILE = ("params", "parameters", "metrics", "per_second", "time", "seconds", "rss", "created", "git_commit", "command", "argv", "version",
            "path", "dataset", "source", "store", "out", "checkpoint", "layers_dir", "lock",
            "memory_bytes", "threads", "descriptor", "hit", "miss", "evict", "fill", "data")


# ---------------------------------------------------------------------------- running commands
@dataclass
class Result:
    code: int
    text: str                     # stdout + stderr
    out: Path | None


def run(argv: list[Any]) -> tuple[int, str]:
    """``shardgnn ARGV`` in this process (one rank); (exit code, stdout + stderr)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:      # a parse error
            code = int(exc.code or 0)
    return code, buf.getvalue()


def _fresh(path: Path) -> Path:
    for p in (path, Path(f"{path}.layers"), Path(f"{path}.ckpt.h5")):
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    return path


# ---------------------------------------------------------------------------- digests
def _skip(name: str) -> bool:
    low = name.lower()
    return low.startswith("t_") or any(v in low for v in VOLATILE)


def h5_digest(path: Path, groups: tuple[str, ...] = ()) -> str:
    """Digest of the datasets (not the attributes) of an HDF5 file, timing series and
    ``/config`` left out; only under ``groups`` when given."""
    h = hashlib.sha256()
    with h5py.File(path, "r") as f:
        names: list[str] = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        for n in sorted(names):
            if n.startswith("config") or _skip(n.split("/")[-1]) or "bytes" in n:
                continue
            if groups and not n.startswith(groups):
                continue
            a = np.asarray(f[n][()])
            h.update(n.encode() + a.tobytes() if a.dtype.kind != "O" else repr(a).encode())
    return h.hexdigest()


def dir_digest(path: Path) -> str:
    """Digest of a dataset or store folder: every array file, and the JSON sidecars without
    their timing and path fields."""
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if not p.is_file() or p.name.endswith((".lock",)) or "results" in p.name:
            continue
        rel = str(p.relative_to(path))
        if p.suffix == ".json":
            def clean(v: Any) -> Any:
                if isinstance(v, dict):
                    return {k: clean(x) for k, x in v.items() if not _skip(k)}
                return v
            h.update(rel.encode() + json.dumps(clean(json.loads(p.read_text())),
                                               sort_keys=True).encode())
        elif p.suffix == ".h5":
            h.update(rel.encode() + h5_digest(p).encode())
        else:
            h.update(rel.encode() + p.read_bytes())
    return h.hexdigest()


def digest(out: Path | None, text: str) -> str:
    if out is None or not out.exists():
        return hashlib.sha256(text.encode()).hexdigest()
    if out.is_dir():
        return dir_digest(out)
    if out.suffix == ".npy":
        return hashlib.sha256(out.read_bytes()).hexdigest()
    if out.suffix == ".h5":
        return h5_digest(out)
    return hashlib.sha256(text.encode()).hexdigest()


def same_results(a: Path | None, b: Path | None, ta: str, tb: str) -> bool:
    """Whether two runs gave the same results (a results file: its embeddings, training curve,
    samples and partition metrics, not its statistics of the run)."""
    if a is not None and a.suffix == ".h5" and a.is_file():
        groups = ("embeddings", "train/loss", "train/val_acc", "sample")
        return h5_digest(a, groups) == h5_digest(b, groups)       # type: ignore[arg-type]
    return digest(a, ta) == digest(b, tb)


def recorded(out: Path) -> dict[str, Any]:
    """What a command recorded about its run: /config and /train attributes of a results file,
    graph.json (with its extra) of a dataset, meta.json (with its params) of a store."""
    def plain(v: Any) -> Any:
        v = v.decode() if isinstance(v, bytes) else v
        return v.tolist() if isinstance(v, np.ndarray) else (v.item() if hasattr(v, "item") else v)

    if out.is_dir():
        side = out / ("graph.json" if (out / "graph.json").exists() else "meta.json")
        meta = json.loads(side.read_text())
        flat = dict(meta)
        for k in ("extra", "params", "parameters", "metrics"):
            flat.update(meta.get(k) or {})
        for k in ("spring", "baselines"):
            flat.update((meta.get("parameters") or meta.get("params") or {}).get(k) or {})
        return flat
    with h5py.File(out, "r") as f:
        rec = {}
        for g in ("train", "infer", "sample", "partition", "perfmodel", "config"):
            if g in f:
                rec.update({k: plain(v) for k, v in f[g].attrs.items()})
        return rec


# ---------------------------------------------------------------------------- the audit table
@dataclass
class Case:
    """One audit entry: ``args`` added to the context's base command line, and the check."""

    args: list[Any]
    check: str | Callable[["Ctx", Result, Result], None] = "changes"
    key: str = ""                     # records: the recorded name
    value: Any = None                 # records: the value expected there
    msg: str = ""                     # refused: text of the error (default: the option name)
    ctx: str = ""                     # base command line (a key of Ctx.bases) ("": the spec's)
    same: bool = False                # records: the output must equal the base run's


@dataclass
class Ctx:
    """Inputs made once, and the base runs of each context."""

    w: Path
    bases: dict[str, list[Any]] = field(default_factory=dict)
    outs: dict[str, Path] = field(default_factory=dict)
    cache: dict[str, Result] = field(default_factory=dict)
    noout: set[str] = field(default_factory=set)
    n: int = 0

    def out_for(self, ctx: str) -> Path:
        self.n += 1
        name = self.outs.get(ctx, Path("out.h5")).name
        (self.w / "runs").mkdir(exist_ok=True)
        return _fresh(self.w / "runs" / f"{self.n}-{name}")

    def base(self, ctx: str) -> Result:
        if ctx not in self.cache:
            r = self.run(ctx, [])
            assert r.code == 0, f"base run {ctx} failed: {r.text[-3000:]}"
            self.cache[ctx] = r
        return self.cache[ctx]

    def run(self, ctx: str, args: list[Any]) -> Result:
        out = self.out_for(ctx)
        tail = [] if ctx in self.noout else ["--out", out]
        words = [str(a).replace("{OUT}", str(out)).replace("@W", str(self.w))
                 for a in self.bases[ctx] + list(args)]
        code, text = run(words + tail)
        return Result(code, text, None if ctx in self.noout else out)


def _changes(ctx: Ctx, base: Result, r: Result) -> None:
    assert r.code == 0, r.text[-3000:]
    assert digest(r.out, r.text) != digest(base.out, base.text), "the output did not change"


def _check(ctx: Ctx, case: Case, name: str, base: Result, r: Result) -> None:
    if callable(case.check):
        case.check(ctx, base, r)
    elif case.check == "changes":
        _changes(ctx, base, r)
    elif case.check == "records":
        assert r.code == 0, r.text[-3000:]
        got = recorded(r.out)                                   # type: ignore[arg-type]
        assert case.key in got, f"{case.key} not recorded: {sorted(got)}"
        want = case.value.replace("@W", str(ctx.w)) if isinstance(case.value, str) else case.value
        assert got[case.key] == want, (case.key, got[case.key], want)
        if case.same:
            assert same_results(base.out, r.out, base.text, r.text)
    elif case.check == "refused":
        assert r.code == 2, f"exit {r.code}, expected a refusal:\n{r.text[-2000:]}"
        assert (case.msg or name) in r.text, r.text[-2000:]
    else:
        raise AssertionError(case.check)


def _file(rel: str) -> Callable[[Ctx, Result, Result], None]:
    """Dedicated: exit 0 and the run wrote ``rel`` (``{OUT}`` = the run's output)."""
    def check(ctx: Ctx, base: Result, r: Result) -> None:
        assert r.code == 0, r.text[-3000:]
        p = Path(rel.replace("{OUT}", str(r.out)).replace("@W", str(ctx.w)))
        assert p.exists(), f"{p} not written"
    return check


def _has(r: Result, name: str) -> None:
    """Dedicated: exit 0 and the results file holds ``name``."""
    assert r.code == 0, r.text[-3000:]
    with h5py.File(r.out, "r") as f:
        assert name in f, list(f)


def _text(want: str) -> Callable[[Ctx, Result, Result], None]:
    """Dedicated: exit 0 and the printed text holds ``want``."""
    def check(ctx: Ctx, base: Result, r: Result) -> None:
        assert r.code == 0 and want in r.text, r.text[-3000:]
    return check


def _fails_naming(want: str) -> Callable[[Ctx, Result, Result], None]:
    """Dedicated for a path or format option: an unusable value fails with a line naming it,
    so the command used it."""
    def check(ctx: Ctx, base: Result, r: Result) -> None:
        assert r.code == 2 and want in r.text, r.text[-3000:]
    return check


R = "records"
X = "refused"


def _knob(bad: Any) -> Callable[[Ctx, Result, Result], None]:
    """Dedicated for a performance knob: the output equals the base run's (same results
    whatever the value), and a value out of range is refused with a line naming the option
    (so the command reads it where it runs)."""
    def check(ctx: Ctx, base: Result, r: Result) -> None:
        assert r.code == 0, r.text[-3000:]
        assert same_results(base.out, r.out, base.text, r.text)
        opt = next(a for a in CURRENT["args"] if str(a).startswith("--"))
        bad_r = ctx.run(CURRENT["ctx"], [opt, bad])
        assert bad_r.code == 2 and opt in bad_r.text, bad_r.text[-2000:]
    return check


#: The case being run (for checks that rerun with another value).
CURRENT: dict[str, Any] = {}


def _force(ctx: Ctx, base: Result, r: Result) -> None:
    """--force replaces an earlier output of the command; without it that is refused."""
    assert r.code == 0, r.text[-3000:]
    words = [str(a).replace("@W", str(ctx.w)) for a in ctx.bases[CURRENT["ctx"]]]
    code, text = run(words + ["--out", r.out])
    assert code == 2, text[-2000:]
    code, text = run(words + ["--force", "--out", r.out])
    assert code == 0, text[-2000:]


def _force_plot(ctx: Ctx, base: Result, r: Result) -> None:
    """inspect --force: an earlier --plot PNG is replaced only with it."""
    assert r.code == 0, r.text[-3000:]
    png = ctx.w / "runs" / "force.png"
    words = ["inspect", ctx.w / "rdm-dssd.h5", "--plot", png]
    assert run(words)[0] == 0 and png.exists()
    code, text = run(words)
    assert code == 2 and str(png) in text, text[-2000:]
    code, text = run(words + ["--force"])
    assert code == 0, text[-2000:]


def _export_to(ctx: Ctx, base: Result, r: Result) -> None:
    """export --to pyg: the model file and its description; another format is refused."""
    assert r.code == 0, r.text[-3000:]
    pt = ctx.w / "runs" / "exp-to.pt"
    code, text = run(["export", ctx.w / "ck.h5", "--to", "pyg", pt])
    assert code == 0 and pt.exists() and Path(f"{pt}.json").exists(), text[-2000:]
    code, text = run(["export", ctx.w / "ck.h5", "--to", "dgl", ctx.w / "runs" / "x.pt"])
    assert code == 2 and "--to" in text, text[-2000:]


def _export_force(ctx: Ctx, base: Result, r: Result) -> None:
    """export --force: an earlier export is replaced only with it."""
    assert r.code == 0, r.text[-3000:]
    pt = ctx.w / "runs" / "exp-force.pt"
    words = ["export", ctx.w / "ck.h5", "--to", "pyg", pt]
    assert run(words)[0] == 0
    code, text = run(words)
    assert code == 2 and str(pt) in text, text[-2000:]
    assert run(words + ["--force"])[0] == 0


def _out(ctx: Ctx, base: Result, r: Result) -> None:
    assert r.code == 0 and r.out is not None and r.out.exists(), r.text[-2000:]


def _resumed(key: str, value: Any) -> Callable[[Ctx, Result, Result], None]:
    """Dedicated for --resume: exit 0 and the results say where training resumed, or the
    curve equals the uninterrupted base run's."""
    def check(ctx: Ctx, base: Result, r: Result) -> None:
        assert r.code == 0, r.text[-3000:]
        if key:
            assert recorded(r.out)[key] == value      # type: ignore[arg-type]
        with h5py.File(base.out, "r") as fb, h5py.File(r.out, "r") as fr:
            assert np.array_equal(fb["train/loss"][()], fr["train/loss"][()], equal_nan=True)
    return check


AUDIT: dict[str, dict[str, list[Case]]] = {}
SPECS: dict[str, str] = {}          # command name -> default context


def audit(command: str, ctx: str, **cases: Case | list[Case]) -> None:
    """Register the cases of ``command`` (option names with '_' for '-')."""
    SPECS[command] = ctx
    table = AUDIT.setdefault(command, {})
    for name, c in cases.items():
        opt = "--" + name.strip("_").replace("_", "-")
        table.setdefault(opt, []).extend(c if isinstance(c, list) else [c])


# ---------------------------------------------------------------------------- the cases
C = Case
audit("convert", "convert",
      out=C([], _out), format=C(["--format", "mtx"], _fails_naming("MatrixMarket")),
      directed=C(["--directed"]), keep_self_loops=C(["--keep-self-loops"]),
      keep_duplicates=C(["--keep-duplicates"]), num_nodes=C(["--num-nodes", 150], ctx="convert-nosplit"),
      no_weights=[C(["--no-weights"]), C(["--no-weights"], X, ctx="convert-planetoid")],
      edge_types=C(["--edge-types"], ctx="convert-typed"),
      edge_type_names=[C(["--edge-types", "--edge-type-names", "cites,likes"], R,
                         key="edge_type_names", value=["cites", "likes"], ctx="convert-typed"),
                       C(["--edge-type-names", "a,b"], X)],
      node_types=C(["--node-types", "@W/types.npy"]),
      node_type_names=[C(["--node-types", "@W/types.npy", "--node-type-names", "p,q"], R,
                         key="node_type_names", value=["p", "q"]),
                       C(["--node-type-names", "p,q"], X)],
      features=C(["--features", "@W/x2.npy"]), labels=C(["--labels", "@W/y2.npy"]),
      split=C(["--split", 0.5, 0.25, 0.25]),
      split_seed=[C(["--split-seed", 7]), C(["--split-seed", 7], X, ctx="convert-nosplit")],
      structure_only=[C(["--structure-only"], ctx="convert-planetoid"),
                      C(["--structure-only"], X)],
      name=C(["--name", "other"]), chunk_edges=C(["--chunk-edges", 7], _knob(0)),
      merge_memory=C(["--merge-memory", 5], _knob(0)),
      tmp_dir=C(["--tmp-dir", "@W/x2.npy/sub"], _fails_naming("x2.npy")),
      force=C(["--force"], _force),
      pyg=[C([], _file("{OUT}/graph.json"), ctx="convert-pyg"),
           C(["--pyg", "nosuch_audit_mod:X"], _fails_naming("nosuch_audit_mod"), ctx="convert-pyg")],
      root=[C(["--root", "@W/pygroot2"], _file("@W/pygroot2/made"), ctx="convert-pyg"),
            C(["--root", "@W"], X)],
      pyg_arg=[C(["--pyg-arg", "n=41"], ctx="convert-pyg"), C(["--pyg-arg", "n=4"], X)],
      pyg_split=[C(["--pyg-split", 1], ctx="convert-pyg"), C(["--pyg-split", 1], X)])
for gen, base_ctx in (("rmat", "rmat"), ("csbm", "csbm"), ("hetero", "hetero")):
    common = dict(out=C([], _out), force=C(["--force"], _force), seed=C(["--seed", 5]))
    if gen == "rmat":
        audit("generate rmat", "rmat", **common, scale=C(["--scale", 7], ctx="rmat-ef"),
              edges=C(["--edges", 300], ctx="rmat-ef"),
              edge_factor=C(["--edge-factor", 3], ctx="rmat-ef"),
              abc=C(["--abc", 0.4, 0.3, 0.2]), no_permute=C(["--no-permute"]),
              chunk=C(["--chunk", 64], _knob(0)),
              canonical=C(["--canonical"]),
              directed=[C(["--canonical", "--directed"], ctx="rmat-canonical"),
                        C(["--directed"], X)])
    else:
        split = dict(train=C(["--train", 0.3]), val=C(["--val", 0.1]), test=C(["--test", 0.1]),
                     classes=C(["--classes", 2]), features=C(["--features", 3]),
                     feature_snr=[C(["--feature-snr", 2.5]),
                                  C(["--features", 0, "--feature-snr", 2.0], X)])
        if gen == "csbm":
            audit("generate csbm", "csbm", **common, **split, nodes=C(["--nodes", 90]),
                  avg_degree=[C(["--avg-degree", 4]), C(["--p-in", 0.2, "--p-out", 0.01,
                                                         "--avg-degree", 4], X)],
                  homophily=[C(["--homophily", 0.5]), C(["--p-in", 0.2, "--p-out", 0.01,
                                                         "--homophily", 0.5], X)],
                  p_in=C(["--p-in", 0.2, "--p-out", 0.01]),
                  p_out=[C(["--p-in", 0.2, "--p-out", 0.05]), C(["--p-out", 0.05], X)])
        else:
            audit("generate hetero", "hetero", **common, **split, targets=C(["--targets", 50]),
                  hubs=C(["--hubs", 3]), noise=C(["--noise", 9]), hub_degree=C(["--hub-degree", 2]),
                  noise_degree=C(["--noise-degree", 2]), signal=C(["--signal", 0.3]))

SPRING_ONLY = ["--algo", "hdrf"]
audit("partition", "spring",
      out=C([], _out), algo=C(["--algo", "dbh"]), parts=C(["--parts", 3]),
      seed=[C(["--seed", 3]), C(["--seed", 3], X, ctx="hdrf")],
      results=C(["--results", "{OUT}.res.h5"], _file("{OUT}.res.h5")),
      chunk=[C(["--chunk", 50], _knob(0)), C(["--chunk", 50], _knob(0), ctx="adadne")],
      hops=C(["--hops", 2]), refine=C(["--refine", 0]),
      refine_clusters=[C(["--refine-clusters", 0]), C(["--refine-clusters", 1], X, ctx="hdrf")],
      refine_frac=[C(["--refine-frac", 0.2]), C(["--refine-frac", 0.2], X, ctx="hdrf")],
      refine_balance=[C(["--refine-balance", 1.0]),
                      C(["--refine-balance", 1.2], X, ctx="hdrf")],
      beta=[C(["--beta", 0.5]), C(["--beta", 2.0], X, ctx="hdrf")],
      tau=[C(["--tau", 0.5]), C(["--tau", 0.5], X, ctx="hdrf")],
      merge=[C(["--merge", "resort"]), C(["--merge", "resort"], X, ctx="hdrf")],
      assign_order=[C(["--assign-order", "appearance"]),
                    C(["--assign-order", "sorted"], X, ctx="hdrf")],
      stream_order=[C(["--stream-order", "concat"]),
                    C(["--stream-order", "concat"], X, ctx="hdrf")],
      hdrf_lambda=[C(["--hdrf-lambda", 5.0], ctx="hdrf"), C(["--hdrf-lambda", 2.0], X)],
      hdrf_epsilon=[C(["--hdrf-epsilon", 50.0], ctx="hdrf"), C(["--hdrf-epsilon", 2.0], X)],
      vcut_balance=[C(["--vcut-balance", 1.01], R, key="vcut_balance", value=1.01, ctx="hdrf"), C(["--vcut-balance", 1.1], X)],
      twops_port=[C(["--twops-port"], ctx="2ps-l"), C(["--twops-port"], X)],
      twops_balance=[C(["--twops-balance", 1.0], ctx="2ps-l"), C(["--twops-balance", 1.1], X)],
      write_memory=C(["--write-memory", "3M"], R, key="write_memory", value=3 << 20, same=True),
      write_threads=[C(["--write-threads", 0], R, key="write_threads", value=0, same=True),
                     C(["--write-from", "spill", "--write-threads", 1], X,
                       msg="--write-threads")],
      threads=C(["--threads", 2], R, key="threads", value=2, same=True),
      write_from=C(["--write-from", "spill"], R, key="write_from", value="spill", same=True),
      store_compression=C(["--store-compression", "gzip"], R, key="store_compression",
                          value="gzip", same=True),
      devices=[C(["--parts", "auto", "--devices", 3, "--device-mem", 64]),
               C(["--devices", 2], X)],
      device_mem=[C(["--parts", "auto", "--devices", 2, "--device-mem", 1e-5]),
                  C(["--device-mem", 2], X)],
      reserve=[C(["--parts", "auto", "--devices", 2, "--device-mem", 1e-4, "--reserve", 9.9e-5]),
               C(["--reserve", 2], X)],
      dne_lambda=[C(["--dne-lambda", 0.5], ctx="adadne"), C(["--dne-lambda", 0.5], X),
                  C(["--dne-lambda", 0.5], X, ctx="hash2d")],
      dne_balance=[C(["--dne-balance", 1.0], ctx="dne"), C(["--dne-balance", 1.5], X,
                                                          ctx="adadne")],
      ada_wv=C(["--ada-wv", 0.9, "--ada-we", 0.1], ctx="adadne"),
      ada_we=[C(["--ada-wv", 0.1, "--ada-we", 0.9], ctx="adadne"),
              C(["--ada-wv", 0.1, "--ada-we", 0.9], X, ctx="dne", msg="--ada-")],
      ada_lambda_min=[C(["--ada-lambda-min", 0.9], ctx="adadne"),
                      C(["--ada-lambda-min", 0.5], X, ctx="dne")],
      ada_response=[C(["--ada-response", "linear"], ctx="adadne"),
                    C(["--ada-response", "linear"], X, ctx="dne")],
      ada_beta=[C(["--ada-beta", 9.0], ctx="adadne"),
                C(["--ada-response", "linear", "--ada-beta", 2.0], X, ctx="adadne")],
      ada_cap=[C(["--ada-cap", 1.01], ctx="adadne"), C(["--ada-cap", 2.0], X, ctx="dne")],
      ada_tail=[C(["--ada-tail", 0.9], ctx="adadne"), C(["--ada-tail", 0.5], X, ctx="dne")],
      ada_hub_defer=[C(["--ada-hub-defer", 0.01], ctx="adadne"),
                     C(["--ada-hub-defer", 0.5], X, ctx="dne")],
      ada_refine=[C(["--ada-refine", 0], ctx="adadne"),
                  C(["--ada-refine", 1], X, ctx="dne")],
      dne_seed_growth=[C(["--dne-seed-growth", 1.0], R, key="seed_growth", value=1.0, ctx="dne"),
                       C(["--dne-seed-growth", 1.0], X, ctx="hash2d")],
      dne_seed_samples=[C(["--dne-seed-samples", 1], ctx="dne"),
                        C(["--dne-seed-samples", 2], X, ctx="hash2d")],
      max_iterations=[C(["--max-iterations", 1], _fails_naming("--max-iterations"), ctx="dne"),
                      C(["--max-iterations", 5], X, ctx="hash2d")],
      force=[C(["--force"], _force), C(["--force"], _force, ctx="adadne")],
      memory=[C(["--memory", "4G"], _knob("1K")), C(["--memory", "4G"], _knob("1K"), ctx="adadne")],
      balance_limits=C(["--balance-limits", "1,1,1,1"], _fails_naming("--allow-imbalance")),
      allow_imbalance=C(["--balance-limits", "1,1,1,1", "--allow-imbalance"],
                        _text("--allow-imbalance")),
      refine_floor=[C(["--refine-floor", 0.5], R, key="refine_floor", value=0.5),
                    C(["--refine-floor", 0.5], X, ctx="hdrf")],
      owner_balance=[C(["--owner-balance", 0], R, key="owner_balance", value=0.0, ctx="hdrf"),
                     C(["--owner-balance", 1.1], X)])

COMMON = dict(  # every engine: the common options
    out=C([], _out), epochs=C(["--epochs", 3]), hidden=C(["--hidden", 5]),
    layers=C(["--layers", 1]), dropout=C(["--dropout", 0.1]), lr=C(["--lr", 0.05]),
    weight_decay=C(["--weight-decay", 0.1]), seed=C(["--seed", 9]),
    allow_nan_loss=C(["--allow-nan-loss"], R, key="allow_nan_loss", value=True, same=True),
    force=C(["--force"], _force))


def ckpt(longer: str) -> dict[str, Any]:
    """--checkpoint-every, --checkpoint, --eval-every (on the engine's longer base run)."""
    return dict(checkpoint_every=C(["--checkpoint-every", 1], _file("{OUT}.ckpt.h5")),
                checkpoint=C(["--checkpoint", "{OUT}.mine.h5"], _file("{OUT}.mine.h5")),
                eval_every=[C(["--eval-every", 2], ctx=longer),
                            C(["--eval", "none", "--eval-every", 2], X)])


for eng in ("rdm", "cagnet1d"):
    audit(f"train {eng}", eng, **COMMON, **ckpt(f"{eng}-4"),
          resume=C(["--epochs", 4, "--resume", f"@W/{eng}-ck.h5"], _resumed("resumed_after_epoch", 2),
                   ctx=f"{eng}-4"),
          eval=C(["--eval", "none"]),
          order=C(["--order", "SDSD"], R, key="order", value="SDSD"),
          order_from=C(["--order-from", "@W/rdm-dssd.h5"], R, key="order", value="DSSD"),
          memo=C(["--order", "SDSD", "--no-memo"], R, key="memo", value=False),
          bias=C(["--no-bias"]), dtype=C(["--dtype", "float64"]),
          backend=C(["--backend", "scipy"], R, key="spmm_kernel", value="scipy"),
          partition=C(["--partition", "@W/parts"], R, key="partition", value="@W/parts"),
          feature_norm=C(["--feature-norm", "row"]),
          chunk=C(["--chunk", 17], _knob(0)))
for eng in ("rdm", "cagnet1d"):
    audit(f"train {eng}", eng,
          device=[C(["--device", "cpu"], R, key="device", value="cpu", same=True),
                  C(["--device", "cpu", "--device-id", 1], X, msg="--device-id 1")],
          device_id=[C(["--device-id", "local-rank"], R, key="device", value="cpu", same=True),
                     C(["--device-id", 1], X, msg="--device-id 1")],
          spmm=C(["--spmm", "scipy"], R, key="spmm_kernel", value="scipy"),
          mpi_path=[C(["--mpi-path", "host"], R, key="mpi_path", value="host", same=True),
                    C(["--mpi-path", "direct"], X, msg="--mpi-path direct")],
          memory_budget=C(["--memory-budget", "1G"], X, msg="--memory-budget"))
AUDIT["train rdm"]["--memory-budget"].append(
    C(["--replicas", "auto", "--memory-budget", "1G"], R, key="memory_budget", value=1 << 30))
AUDIT["train rdm"]["--replicas"] = [C(["--replicas", 1], R, key="replicas", value=1)]
AUDIT["train cagnet1d"]["--replicas"] = [C(["--replicas", 1], X)]
audit("train rdm", "rdm",
      saint=C(["--saint", "node", "--saint-presample", 2]),
      saint_budget=[C(["--saint", "node", "--saint-budget", 50], ctx="rdm-saint"),
                    C(["--saint-budget", 50], X)],
      saint_steps=[C(["--saint", "node", "--saint-steps", 2], ctx="rdm-saint"),
                   C(["--saint-steps", 2], X)],
      saint_presample=[C(["--saint", "node", "--saint-presample", 3], ctx="rdm-saint"),
                       C(["--saint-presample", 3], X)],
      saint_walk_length=[C(["--saint", "rw", "--saint-walk-length", 4], ctx="rdm-saint-rw"),
                         C(["--saint", "node", "--saint-walk-length", 4], X)])
audit("train averaging", "avg", **COMMON, **ckpt("avg-4"),
      feature_norm=C(["--feature-norm", "row"]),
      resume=C(["--epochs", 4, "--resume", "@W/avg-ck.h5"], _resumed("", None), ctx="avg-4"),
      eval=C(["--eval", "local"]), model=C(["--model", "sage"]),
      heads=[C(["--model", "gat", "--heads", 2], ctx="avg-gat"), C(["--heads", 2], X)],
      ngnn_layers=[C(["--model", "ngnn-gcn", "--ngnn-layers", 2], ctx="avg-ngnn"),
                   C(["--ngnn-layers", 2], X)],
      sync=C(["--sync", "grad"]),
      sync_every=[C(["--sync-every", 2]), C(["--sync", "grad", "--sync-every", 2], X)],
      average_optimizer=[C(["--sync-every", 2, "--average-optimizer"], ctx="avg-local"),
                         C(["--sync", "grad", "--average-optimizer"], X)],
      local_optimizer=[C(["--local-optimizer", "--sync-every", 2]),
                       C(["--sync", "grad", "--local-optimizer"], X, msg="--average-optimizer")],
      mode=C(["--mode", "minibatch"]),
      sampler=C(["--sampler", "saint-edge", "--saint-presample", 2]),
      cluster_size=[C(["--sampler", "cluster", "--cluster-size", 8], ctx="avg-cluster"),
                    C(["--cluster-size", 8], X)],
      clusters_per_batch=[C(["--sampler", "cluster", "--clusters-per-batch", 1], ctx="avg-cluster"),
                          C(["--clusters-per-batch", 2], X)],
      fanouts=[C(["--mode", "minibatch", "--fanouts", "2,-1"], ctx="avg-mb"),
               C(["--mode", "minibatch", "--fanouts", "-1,-1"], R, key="fanouts", value=[-1, -1],
                 ctx="avg-mb"),
               C(["--fanouts", "-1,-1"], X)],
      batch_size=[C(["--mode", "minibatch", "--batch-size", 7], ctx="avg-mb"),
                  C(["--batch-size", 7], X)],
      saint_budget=[C(["--sampler", "saint-node", "--saint-budget", 30], ctx="avg-saint"),
                    C(["--saint-budget", 30], X)],
      saint_steps=[C(["--sampler", "saint-node", "--saint-steps", 3], ctx="avg-saint"),
                   C(["--saint-steps", 3], X)],
      saint_presample=[C(["--sampler", "saint-node", "--saint-presample", 4], ctx="avg-saint"),
                       C(["--saint-presample", 4], X)],
      saint_walk_length=[C(["--sampler", "saint-rw", "--saint-walk-length", 4],
                           ctx="avg-saint-rw"),
                         C(["--sampler", "saint-node", "--saint-walk-length", 4], X)])
audit("train sampled", "sampled", **COMMON, **ckpt("sampled-2"),
      feature_norm=C(["--feature-norm", "row"]),
      resume=C(["--epochs", 2, "--resume", "@W/sampled-ck.h5"], _resumed("", None),
               ctx="sampled-2"),
      eval=C(["--eval", "none"]), model=C(["--model", "sage"]),
      heads=[C(["--model", "gat", "--heads", 2], ctx="sampled-gat"), C(["--heads", 2], X)],
      fanouts=C(["--fanouts", "-1,-1"]), batch_size=C(["--batch-size", 33]),
      sampler=C(["--sampler", "keyed"]),
      sample_replace=[C(["--sample-replace"]),
                      C(["--sampler", "keyed", "--sample-replace"], X)],
      direction=[C(["--direction", "in"], ctx="sampled-directed"), C(["--direction", "in"], X)],
      eval_batch_size=[C(["--eval-batch-size", 5]),
                       C(["--eval", "none", "--eval-batch-size", 5], X)],
      dataset=[C(["--dataset", "@W/csbm"], R, key="dataset", value="@W/csbm", same=True),
               C(["--dataset", "@W/het"], _fails_naming("het"))],
      type_fanouts=[C(["--type-fanouts", "0:1,1 1:3,3"], ctx="sampled-link-het"),
                    C(["--type-fanouts", "nosuch:1,1"], _fails_naming("nosuch"),
                      ctx="sampled-link-het")],
      task=C(["--task", "link", "--model", "sage"]),
      decoder=[C(["--decoder", "distmult"], ctx="sampled-link"), C(["--decoder", "mlp"], X)],
      neg=[C(["--neg", 3], ctx="sampled-link"), C(["--neg", 3], X)],
      neg_sampler=[C(["--neg-sampler", "degree"], ctx="sampled-link"),
                   C(["--neg-sampler", "degree"], X)],
      neg_filtered=[C(["--neg-filtered", "--neg", 8], ctx="sampled-link"),
                    C(["--neg-filtered"], X)],
      loss=[C(["--loss", "margin"], ctx="sampled-link"), C(["--loss", "margin"], X)],
      margin=[C(["--loss", "margin", "--margin", 0.1], ctx="sampled-link-margin"),
              C(["--margin", 0.1], X)],
      target_types=[C(["--target-types", "target-hub"], ctx="sampled-link-het"),
                    C(["--target-types", "nosuch"], _fails_naming("nosuch"),
                      ctx="sampled-link-het")],
      link_split=[C(["--link-split", "0.6,0.2,0.2"], ctx="sampled-link"),
                  C(["--link-split", "0.6,0.2,0.2"], X)],
      link_split_files=[C(["--link-split-files", "@W/nosuch-split"],
                          _fails_naming("nosuch-split"), ctx="sampled-link"),
                        C(["--link-split-files", "@W/nosuch-split"], X)],
      embed_dim=[C(["--embed-dim", 4], ctx="sampled-link"), C(["--embed-dim", 4], X)],
      embed_optimizer=[C(["--embed-optimizer", "adagrad"], ctx="sampled-link-emb"),
                       C(["--embed-optimizer", "adagrad"], X)],
      embed_lr=[C(["--embed-lr", 0.5], ctx="sampled-link-emb"), C(["--embed-lr", 0.5], X)],
      no_features=[C(["--no-features"], ctx="sampled-link-emb"), C(["--no-features"], X)],
      eval_edges=[C(["--eval-edges", 3], ctx="sampled-link"), C(["--eval-edges", 3], X)],
      steps_per_epoch=[C(["--steps-per-epoch", 1], ctx="sampled-link"),
                       C(["--steps-per-epoch", 1], X)])
NAU_MODELS = {"pinsage": ("walks", "walk_length", "topk"), "jknet": ("rings", "jk_mode"),
              "pgnn": ("anchor_sets", "anchor_hops")}
nau_cases: dict[str, Any] = dict(
    **COMMON,
    eval_every=C(["--eval-every", 2]), model=C(["--model", "pinsage"]),
    feature_norm=C(["--feature-norm", "row"]),
    checkpoint_every=C(["--checkpoint-every", 1], _file("{OUT}.ckpt.h5")),
    checkpoint=C(["--checkpoint", "{OUT}.mine.h5"], _file("{OUT}.mine.h5")),
    resume=C(["--epochs", 4, "--resume", "@W/nau-ck.h5"], _resumed("", None), ctx="nau-4"),
    aggregation=C(["--aggregation", "scatter"], R, key="aggregation", value="scatter"),
    exclude_edge_types=C(["--exclude-edge-types", "0"], ctx="nau-het"),
    partition=C(["--partition", "@W/parts1"], R, key="partition", value="@W/parts1"),
    pipeline=[C(["--partition", "@W/parts1", "--no-pipeline"], R, key="pipeline", value=False),
              C(["--no-pipeline"], X)],
    partial_layers=[C(["--partition", "@W/parts1", "--partial-layers", "all"], R,
                      key="partial_layers", value="all"),
                    C(["--partition", "@W/parts1", "--no-pipeline", "--partial-layers", "all"],
                      X)],
    balance=C(["--balance", "--epochs", 3], R, key="balance", value=True),
    metapaths=[C(["--model", "magnn", "--metapaths", "target-hub-target"], ctx="nau-het"),
               C(["--metapaths", "a-b-a"], X)],
    target_type=[C(["--model", "magnn", "--target-type", "target"], R, key="target_type",
                   value="target", ctx="nau-het"),
                 C(["--target-type", "t"], X)],
    attn_heads=[C(["--model", "magnn", "--attn-heads", 1], ctx="nau-het"),
                C(["--attn-heads", 2], X)],
    max_instances=[C(["--model", "magnn", "--max-instances", 2], ctx="nau-het"),
                   C(["--max-instances", 2], X)])
for model, opts in NAU_MODELS.items():
    vals = {"walks": 2, "walk_length": 1, "topk": 2, "rings": 1, "jk_mode": "max",
            "anchor_sets": 3, "anchor_hops": 1}
    for o in opts:
        flag = "--" + o.replace("_", "-")
        nau_cases[o] = [C(["--model", model, flag, vals[o]]), C([flag, vals[o]], X)]
for o, v in (("balance_after", 2), ("balance_tolerance", 0.5), ("balance_plans", 1),
             ("balance_chunks", 2), ("balance_every", 2)):
    flag = "--" + o.replace("_", "-")
    nau_cases[o] = [C(["--balance", "--epochs", 3, flag, v], R, key=o, value=v),
                    C(["--partition", "@W/parts1", flag, v], X)]
audit("train nau", "nau", **nau_cases)

audit("sample", "sample",
      out=C([], _out), seeds=C(["--seeds", "@W/seeds2.txt"], ctx="sample-seeds"),
      mask=C(["--mask", "val"]), fanouts=[C(["--fanouts", "-1,2"]), C(["--fanouts", "-1,-1"])],
      type_fanouts=[C(["--type-fanouts", "0:2,2 1:1,1"], ctx="sample-het"),
                    C(["--type-fanouts", "0:2,2"], X)],
      mode=C(["--mode", "keyed"]),
      replace=[C(["--replace"]), C(["--mode", "keyed", "--replace"], X)],
      direction=[C(["--direction", "in"], ctx="sample-directed"), C(["--direction", "in"], X)],
      batch_size=C(["--batch-size", 5]), repeats=C(["--repeats", 2]), seed=C(["--seed", 4]),
      dataset=[C(["--dataset", "@W/csbm"], R, key="dataset", value="@W/csbm", same=True),
               C(["--dataset", "@W/het"], _fails_naming("het"))],
      force=C(["--force"], _force))

audit("infer", "infer",
      out=C([], _out), force=C(["--force"], _force), fanouts=[C(["--fanouts", "2,2"]),
                                C(["--fanouts", "-1,-1"], R, key="fanouts", value="-1,-1",
                                  same=True)],
      layers_dir=C(["--layers-dir", "{OUT}.mine"], _file("{OUT}.mine/layer-01.h5")),
      cache_chunks=[C(["--cache-chunks", 0], R, key="cache_chunks", value=0, same=True),
                    C(["--samplewise", "--cache-chunks", 0], X)],
      cache_policy=[C(["--cache-policy", "lru"], R, key="cache_policy", value="lru", same=True),
                    C(["--samplewise", "--cache-policy", "lru"], X)],
      order=[C(["--order", "ns"], R, key="order", value="ns", same=True),
             C(["--samplewise", "--order", "ns"], X)],
      chunk_rows=C(["--chunk-rows", 16], R, key="chunk_rows", value=16, same=True),
      compression=C(["--compression", "gzip"], R, key="compression", value="gzip", same=True),
      samplewise=C(["--samplewise"], R, key="samplewise", value="target"),
      batch_size=[C(["--samplewise", "--batch-size", 8], R, key="batch_size", value=8),
                  C(["--batch-size", 8], X)],
      target_fraction=[C(["--samplewise", "--target-fraction", 0.5]),
                       C(["--target-fraction", 0.5], X)],
      score_edges=C(["--score-edges", "@W/pairs.txt"], lambda c, b, r: _has(r, "infer/scores")),
      dataset=[C(["--dataset", "@W/csbm"], R, key="dataset", value="@W/csbm", same=True),
               C(["--dataset", "@W/het"], _fails_naming("het"))],
      seed=[C(["--fanouts", "2,2", "--seed", 3], ctx="infer-sampling"),
            C(["--seed", 3], X)],
      no_resume=C(["--no-resume"], R, key="resume", value=False, same=True))

audit("info", "info", json=C(["--json"]), chunk=C(["--chunk", 13], _knob(0)))
audit("export", "export", to=C([], _export_to), force=C([], _export_force))
audit("inspect", "inspect", json=C(["--json"]), max_elems=C(["--max-elems", 1]),
      plot=C(["--plot", "@W/runs/curve.png"], _file("@W/runs/curve.png")),
      force=[C([], _force_plot), C(["--force"], X)])
audit("run", "run", dir=C(["--dir", "@W/runs/jobdir"], _file("@W/runs/jobdir/data/graph.json")),
      results=C(["--results", "@W/runs/job.h5"], _file("@W/runs/job.h5")),
      force=C(["--force"], _text("ran generate")))
#: the device options every engine and infer share (train/config.DeviceOptions): on this CPU
#: machine --device cpu and --mpi-path host give the base run's output, an unknown value is
#: refused naming the option, and the GPU-only values are refused on --device cpu
DEVICE = dict(device=C(["--device", "cpu"], _knob("tpu")),
              device_id=C(["--device-id", 1], X, msg="--device-id 1"),
              mpi_path=[C(["--mpi-path", "host"], _knob("nccl")),
                        C(["--mpi-path", "direct"], X, msg="--mpi-path direct")])
for _cmd, _ctx in (("train averaging", "avg"), ("train sampled", "sampled"), ("train nau", "nau"),
                   ("infer", "infer")):
    audit(_cmd, _ctx, **DEVICE)


def _engine_ran(eng: str) -> Callable[[Ctx, Result, Result], None]:
    """Dedicated for --engine: the results file is the named engine's (its command line and
    its /train)."""
    def check(ctx: Ctx, base: Result, r: Result) -> None:
        assert r.code == 0, r.text[-3000:]
        with h5py.File(r.out, "r") as f:
            assert f"--engine {eng}" in str(f.attrs["command"]) and "loss" in f["train"]
    return check


for _eng in ("rdm", "cagnet1d", "averaging", "sampled", "nau"):
    AUDIT[f"train {_eng}"]["--engine"] = [C([], _engine_ran(_eng))]


# ---------------------------------------------------------------------------- inputs and bases
#: a PyG dataset function for convert --pyg (--root: it marks the folder; n: vertices; masks
#: with two split columns that differ)
PYG_MODULE = """
from pathlib import Path

import torch
from torch_geometric.data import Data


def make(root, n=30):
    Path(root).mkdir(parents=True, exist_ok=True)
    (Path(root) / "made").write_text("1")
    n = int(n)
    src = torch.arange(n)
    ei = torch.stack([torch.cat([src, (src + 1) % n]), torch.cat([(src + 1) % n, src])])
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=g)
    y = torch.arange(n) % 2
    train = torch.stack([src % 3 == 0, src % 3 == 1], dim=1)
    return Data(edge_index=ei, x=x, y=y, train_mask=train, val_mask=~train,
                test_mask=torch.zeros(n, 2, dtype=torch.bool))
"""

def _ok(argv: list[Any]) -> None:
    code, text = run(argv)
    assert code == 0, text[-3000:]


@pytest.fixture(scope="module")
def ctx(tmp_path_factory) -> Any:
    """Inputs and the base command lines; one torch thread (as under mpiexec, where every rank
    has one): a few hundred runs on tiny graphs, where a thread pool costs more than it gives."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield _inputs(tmp_path_factory.mktemp("audit"))
    finally:
        torch.set_num_threads(threads)


def _inputs(w: Path) -> Ctx:
    c = Ctx(w)
    rng = np.random.default_rng(0)
    n = 120
    src = np.concatenate([np.arange(n), rng.integers(0, n, 300)])
    dst = np.concatenate([(np.arange(n) + 1) % n, rng.integers(0, n, 300)])
    lines = [f"{u} {v} {rng.random():.3f}" for u, v in zip(src, dst)] + ["3 3 0.5", "4 5 0.7"]
    (w / "raw.txt").write_text("\n".join(lines) + "\n")
    (w / "rawt.txt").write_text("\n".join(f"{u} {v} {(u + v) % 2}" for u, v in zip(src, dst))
                                + "\n")
    for name, f in (("x", 4), ("x2", 3)):
        np.save(w / f"{name}.npy", rng.normal(size=(n, f)).astype(np.float32))
    np.save(w / "y.npy", rng.integers(0, 3, n))
    np.save(w / "y2.npy", rng.integers(0, 2, n))
    np.save(w / "types.npy", (np.arange(n) % 2).astype(np.int64))
    _ok(["generate", "csbm", "--nodes", 240, "--classes", 3, "--features", 6, "--avg-degree", 6,
         "--seed", 1, "--out", w / "csbm"])
    _ok(["generate", "hetero", "--targets", 90, "--classes", 3, "--features", 6, "--out",
         w / "het"])
    _ok(["convert", w / "raw.txt", "--directed", "--features", w / "x.npy", "--labels",
         w / "y.npy", "--split", 0.6, 0.2, 0.2, "--out", w / "dir"])
    (w / "seeds.txt").write_text("\n".join(str(i) for i in range(0, 240, 7)) + "\n")
    (w / "seeds2.txt").write_text("\n".join(str(i) for i in range(1, 240, 5)) + "\n")
    (w / "pairs.txt").write_text("0 1\n2 3\n5 9\n")
    for data, algo, parts, out in (("csbm", "spring", 2, "parts"), ("csbm", "spring", 1, "parts1"),
                                   ("csbm", "adadne", 2, "vparts"), ("dir", "adadne", 2, "dvparts"),
                                   ("het", "adadne", 2, "hvparts")):
        _ok(["partition", w / data, "--algo", algo, "--parts", parts, "--out", w / out])
    _ok(["train", "--engine", "sampled", w / "vparts", "--epochs", 1, "--batch-size", 64,
         "--checkpoint", w / "ck.h5", "--out", w / "ck-run.h5"])
    _ok(["train", "--engine", "sampled", w / "vparts", "--epochs", 1, "--batch-size", 64,
         "--checkpoint", w / "sampled-ck.h5", "--out", w / "sampled-ck-run.h5"])
    for eng in ("rdm", "cagnet1d"):
        _ok(["train", "--engine", eng, w / "csbm", "--epochs", 2, "--checkpoint",
             w / f"{eng}-ck.h5", "--out", w / f"{eng}-ck-run.h5"])
    _ok(["train", "--engine", "rdm", w / "csbm", "--epochs", 2, "--order", "DSSD", "--out",
         w / "rdm-dssd.h5"])
    _ok(["train", "--engine", "averaging", w / "parts", "--epochs", 2, "--checkpoint",
         w / "avg-ck.h5", "--out", w / "avg-ck-run.h5"])
    _ok(["train", "--engine", "nau", w / "csbm", "--epochs", 2, "--checkpoint", w / "nau-ck.h5",
         "--out", w / "nau-ck-run.h5"])
    (w / "pygmod_audit.py").write_text(PYG_MODULE)
    import sys
    sys.path.insert(0, str(w))
    (w / "job.toml").write_text("[job]\ndir = 'jobw'\n[generate]\ngenerator = 'csbm'\n"
                                "nodes = 50\nfeatures = 3\n")
    B = c.bases
    B["convert"] = ["convert", "@W/raw.txt", "--features", "@W/x.npy", "--labels", "@W/y.npy",
                    "--split", 0.6, 0.2, 0.2]
    B["convert-nosplit"] = ["convert", "@W/raw.txt"]
    B["convert-typed"] = ["convert", "@W/rawt.txt"]
    B["convert-planetoid"] = ["convert", ROOT / "inputs" / "cora"]
    B["convert-pyg"] = ["convert", "--pyg", "pygmod_audit:make", "--root", "@W/pygroot"]
    B["rmat"] = ["generate", "rmat", "--scale", 6, "--edges", 400]
    B["rmat-ef"] = ["generate", "rmat", "--scale", 6]
    B["rmat-canonical"] = ["generate", "rmat", "--scale", 6, "--edges", 400, "--canonical"]
    B["csbm"] = ["generate", "csbm", "--nodes", 60, "--features", 4, "--classes", 3]
    B["hetero"] = ["generate", "hetero", "--targets", 40, "--features", 4, "--classes", 3]
    for algo in ("spring", "hdrf", "2ps-l", "adadne", "dne", "hash2d"):
        B[algo] = ["partition", "@W/csbm", "--algo", algo, "--parts", 2]
    for eng in ("rdm", "cagnet1d"):
        B[eng] = ["train", "--engine", eng, "@W/csbm", "--epochs", 2]
        B[f"{eng}-4"] = B[eng] + ["--epochs", 4]
    B["rdm-saint"] = B["rdm"] + ["--saint", "node", "--saint-presample", 2]
    B["rdm-saint-rw"] = B["rdm"] + ["--saint", "rw", "--saint-presample", 2]
    B["avg"] = ["train", "--engine", "averaging", "@W/parts", "--epochs", 2]
    B["avg-4"] = B["avg"] + ["--epochs", 4]
    for k, extra in (("gat", ["--model", "gat"]), ("ngnn", ["--model", "ngnn-gcn"]),
                     ("local", ["--local-optimizer", "--epochs", 3]),
                     ("mb", ["--mode", "minibatch"]), ("cluster", ["--sampler", "cluster"]),
                     ("saint", ["--sampler", "saint-node", "--saint-presample", 2]),
                     ("saint-rw", ["--sampler", "saint-rw", "--saint-presample", 2])):
        B[f"avg-{k}"] = B["avg"] + extra
    B["sampled"] = ["train", "--engine", "sampled", "@W/vparts", "--epochs", 1, "--batch-size", 64]
    B["sampled-2"] = B["sampled"] + ["--epochs", 2]
    B["sampled-gat"] = B["sampled"] + ["--model", "gat"]
    B["sampled-link"] = B["sampled"] + ["--task", "link", "--model", "sage"]
    B["sampled-link-margin"] = B["sampled-link"] + ["--loss", "margin"]
    B["sampled-link-emb"] = B["sampled-link"] + ["--embed-dim", 4]
    B["sampled-link-het"] = ["train", "--engine", "sampled", "@W/hvparts", "--epochs", 1,
                             "--batch-size", 64, "--task", "link", "--model", "rgcn"]
    B["sampled-directed"] = ["train", "--engine", "sampled", "@W/dvparts", "--epochs", 1,
                             "--batch-size", 32]
    B["nau"] = ["train", "--engine", "nau", "@W/csbm", "--epochs", 2]
    B["nau-het"] = ["train", "--engine", "nau", "@W/het", "--epochs", 2]
    B["nau-4"] = B["nau"] + ["--epochs", 4]
    B["export"] = ["export", "@W/ck.h5", "--to", "pyg", "{OUT}"]
    B["sample"] = ["sample", "@W/vparts", "--mask", "train", "--fanouts", "3,3"]
    B["sample-seeds"] = ["sample", "@W/vparts", "--seeds", "@W/seeds.txt", "--fanouts", "3,3"]
    B["sample-het"] = ["sample", "@W/hvparts", "--mask", "train", "--fanouts", "2,2"]
    B["sample-directed"] = ["sample", "@W/dvparts", "--mask", "train", "--fanouts", "2,2"]
    B["infer"] = ["infer", "@W/ck.h5", "@W/vparts"]
    B["infer-sampling"] = B["infer"] + ["--fanouts", "2,2"]
    B["info"] = ["info", "@W/csbm"]
    B["inspect"] = ["inspect", "@W/rdm-dssd.h5"]
    B["run"] = ["run", "@W/job.toml"]
    c.noout = {"info", "inspect", "run", "export"}
    for k in B:
        c.outs[k] = Path("model.pt" if k == "export" else
                         "data" if k.startswith(("convert", "csbm", "hetero", "rmat-canonical"))
                         else "g.npy" if k.startswith("rmat") else
                         "parts" if k in ("spring", "hdrf", "2ps-l", "adadne", "dne", "hash2d")
                         else "out.h5")
    return c


# ---------------------------------------------------------------------------- the tests
def _commands() -> dict[str, dict[str, tuple[str, ...]]]:
    """command -> {option strings of one action: dest} for every option the parsers define;
    `train` once per engine with the options that engine accepts."""
    from shardgnn.cli.train import accepted_options
    from shardgnn.registry import ENGINES

    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    out: dict[str, dict[str, tuple[str, ...]]] = {}

    def options(p: argparse.ArgumentParser, keep: Callable[[str], bool] = lambda d: True
                ) -> dict[str, tuple[str, ...]]:
        return {a.dest + "|" + a.option_strings[0]: tuple(a.option_strings) for a in p._actions
                if a.option_strings and a.dest != "help" and keep(a.dest)}

    for name, p in sub.choices.items():
        inner = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if inner:
            for g, gp in inner[0].choices.items():
                out[f"{name} {g}"] = options(gp)
        elif name == "train":
            for eng in ENGINES:
                acc = accepted_options(eng)
                out[f"train {eng}"] = options(p, lambda d, acc=acc: d in acc)
        else:
            out[name] = options(p)
    return out


def test_every_option_of_every_command_is_audited():
    missing, stale = [], []
    commands = _commands()
    for cmd, opts in commands.items():
        table = AUDIT.get(cmd, {})
        for strings in opts.values():
            if not any(s in table for s in strings):
                missing.append(f"{cmd} {strings[-1]}")
        known = {s for strings in opts.values() for s in strings}
        stale += [f"{cmd} {o}" for o in table if o not in known]
    stale += [c for c in AUDIT if c not in commands]
    assert not missing, f"options without an audit entry: {missing}"
    assert not stale, f"audit entries of no option: {stale}"


CASES = [(cmd, opt, i) for cmd, table in AUDIT.items() for opt, cases in table.items()
         for i in range(len(cases))]


@pytest.mark.parametrize("cmd,opt,i", CASES, ids=[f"{c}{o}-{i}" for c, o, i in CASES])
def test_option_takes_effect_or_is_refused(ctx, cmd, opt, i):
    case = AUDIT[cmd][opt][i]
    name = case.ctx or SPECS[cmd]
    CURRENT.update(args=case.args, ctx=name)
    base = ctx.base(name)
    r = ctx.run(name, case.args)
    _check(ctx, case, opt, base, r)
