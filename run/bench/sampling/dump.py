"""What `shardgnn sample` spends writing its dump, against the whole command, and that the samples
do not change.

Builds a power-law graph of about 1.3 M edges (R-MAT 2^17, 1.4 M generated edges, seed 7, ids
kept, random 60/20/20 masks; 83 k vertices with edges), cuts it with ``shardgnn partition --algo
adadne --parts 4``, then runs ``shardgnn sample STORE --mask train --fanouts 15,10,5
--batch-size 1024`` (P = 1) ``--repeat`` times while holding ``/tmp/shardgnn-bench.lock``: the
command's wall and CPU seconds (``/usr/bin/time``, the whole process: start, imports, store,
sampling, write) and, from a worker that times ``sampling.dump.main`` in the same process, the
sampling seconds and the write phase in wall and CPU seconds (from the results file's creation
to the end: gather, batch order, HDF5; on a machine shared with other jobs the wall time of the
write mostly measures the disk's queue, the CPU time what the write itself costs). With
``--baseline-src DIR`` (another checkout's ``src``, e.g. main's) the same runs use that code
first, and every sampled column of the two dumps is compared (a column the new format drops
must be all zeros). Writes RESULTS/sample_dump.json with the git commit and the load.

    python run/bench/sampling/dump.py RESULTS [--baseline-src /path/to/main/src] [--repeat 3]
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))  # run/bench: the shared harness
sys.path.insert(1, str(BENCH / "partition"))  # streaming_data: the shared inputs
import harness

LOCK = "/tmp/shardgnn-bench.lock"
FANOUTS, BATCH = "15,10,5", 1024


def build(work: Path) -> Path:
    """The dataset and its AdaDNE store (once)."""
    import streaming_data as sd
    from shardgnn.io.canonical import write_dataset

    data, store = work / "g", work / "store"
    if not (data / "graph.json").exists():
        e = sd.rmat_edges(17, 1_400_000, 7)
        e = e[e[:, 0] != e[:, 1]]
        key = np.unique(np.minimum(e[:, 0], e[:, 1]) << 32 | np.maximum(e[:, 0], e[:, 1]))
        e = np.column_stack([key >> 32, key & 0xFFFFFFFF])
        n = 1 << 17
        rng = np.random.default_rng(0)
        r = rng.random(n)
        write_dataset(data, e, n, x=rng.normal(size=(n, 16)).astype(np.float32),
                      y=rng.integers(0, 4, n), masks={"train_mask": r < 0.6,
                                                      "val_mask": (r >= 0.6) & (r < 0.8),
                                                      "test_mask": r >= 0.8})
    if not (store / "meta.json").exists():
        harness.sh(harness.shardgnn(["partition", data, "--algo", "adadne", "--parts", 4,
                                     "--out", store]))
    return store


def worker(store: str, out: str) -> int:
    """One `shardgnn sample` in this process: prints TIMES {sampling, main, write phase}."""
    from shardgnn import log
    from shardgnn.comm import world
    from shardgnn.io import results
    from shardgnn.sampling.dump import SampleConfig, main

    comm = world()
    log.setup(comm.rank)
    os.environ["SHARDGNN_PROGRESS"] = "0"
    mark: dict[str, float] = {}
    opened = results.ResultWriter.__init__

    def opening(self: Any, *a: Any, **k: Any) -> None:   # the write starts (either version)
        mark.setdefault("wall", time.perf_counter())
        mark.setdefault("cpu", time.process_time())
        opened(self, *a, **k)

    results.ResultWriter.__init__ = opening   # type: ignore[method-assign]
    t0, c0 = time.perf_counter(), time.process_time()
    s = main(comm, SampleConfig(store=store, out=out, fanouts=FANOUTS, mask="train",
                                batch_size=BATCH))
    t1, c1 = time.perf_counter(), time.process_time()
    print("TIMES " + json.dumps({"sampling_s": s["seconds"], "main_s": t1 - t0,
                                 "write_phase_s": t1 - mark["wall"],
                                 "write_phase_cpu_s": c1 - mark["cpu"],
                                 "before_write_cpu_s": mark["cpu"] - c0,
                                 "reported_write_s": s.get("seconds_write")}), flush=True)
    return 0


def measure(store: Path, out: Path, src: str | None, repeat: int) -> list[dict[str, Any]]:
    """``repeat`` timed workers (code from ``src`` when given)."""
    env = harness.bench_env({"PYTHONPATH": os.pathsep.join(
        [p for p in (src, str(Path(__file__).parent)) if p])})
    runs = []
    for _ in range(repeat):
        out.unlink(missing_ok=True)
        rec = harness.timed([sys.executable, Path(__file__).resolve(), "--worker", store, out],
                            env=env)
        line = [ln for ln in rec["stdout_tail"].splitlines() if ln.startswith("TIMES ")][-1]
        t = json.loads(line[len("TIMES "):])
        rec.update(t, write_share_of_command=t["write_phase_s"] / rec["wall_s"],
                   write_cpu_share_of_command=t["write_phase_cpu_s"] / rec["cpu_s"])
        runs.append(rec)
    return runs


def compare(base: Path, new: Path) -> dict[str, Any]:
    """Every column of both dumps equal; columns only in ``base`` all zero."""
    import h5py

    def cols(path: Path) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        with h5py.File(path) as f:
            f["sample"].visititems(lambda k, o: out.__setitem__(k, o[()])
                                   if isinstance(o, h5py.Dataset) and k != "load" else None)
        return out

    a, b = cols(base), cols(new)
    dropped = sorted(set(a) - set(b))
    return {"columns_compared": len(set(a) & set(b)),
            "identical": all(np.array_equal(a[k], b[k]) for k in set(a) & set(b)),
            "dropped": dropped, "dropped_all_zero": all(not a[k].any() for k in dropped),
            "added": sorted(set(b) - set(a)), "bytes": {"base": base.stat().st_size,
                                                        "new": new.stat().st_size}}


def main_bench(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?")
    ap.add_argument("--work", default="/tmp/shardgnn-bench-sample")
    ap.add_argument("--baseline-src", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--worker", nargs=2, metavar=("STORE", "OUT"))
    args = ap.parse_args(argv)
    if args.worker:
        return worker(*args.worker)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    store = build(work)
    load0 = harness.loadavg()
    doc: dict[str, Any] = {"graph": "R-MAT 2^17, 1.4 M generated edges, seed 7",
                           "command": f"shardgnn sample STORE --mask train --fanouts {FANOUTS} "
                                      f"--batch-size {BATCH} --out OUT (P = 1)"}
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # the timed part: no other benchmark at the same time
        doc["lock_taken_loadavg"] = harness.loadavg()
        if args.baseline_src:
            doc["baseline_git"] = harness.git_state(Path(args.baseline_src).resolve().parent)
            doc["baseline"] = measure(store, work / "base.h5", args.baseline_src, args.repeat)
        doc["new"] = measure(store, work / "new.h5", None, args.repeat)
    if args.baseline_src:
        doc["samples"] = compare(work / "base.h5", work / "new.h5")
    for k in ("baseline", "new"):
        if k in doc:
            doc[f"{k}_median"] = {m: float(np.median([r[m] for r in doc[k]]))
                                  for m in ("wall_s", "cpu_s", "sampling_s", "write_phase_s",
                                            "write_phase_cpu_s", "write_share_of_command",
                                            "write_cpu_share_of_command")}
    print(json.dumps({k: v for k, v in doc.items() if k.endswith("median") or k == "samples"},
                     indent=1))
    if args.results:
        harness.write_result(Path(args.results) / "sample_dump.json", doc, load0)
    return 0


if __name__ == "__main__":
    sys.exit(main_bench())
