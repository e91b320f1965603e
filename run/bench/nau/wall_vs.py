"""Whole-command time of one NAU training command, this tree against a baseline's source tree.

    python run/bench/nau/wall_vs.py OUT.json --base-src DIR --data DIR [--model pinsage]
        [--ranks 1,2] [--epochs 4] [--rounds 3] [-- EXTRA TRAIN OPTIONS]

``DIR`` of ``--base-src`` is a checkout of the baseline (``git worktree add DIR COMMIT``): its
``src`` goes first on ``PYTHONPATH``. Per rank count the two trees run in turn, ``--rounds``
times (this tree first in odd rounds, the baseline first in even ones), each run under
``/usr/bin/time -v``: the command's wall seconds (what a user waits for: start-up, load,
every epoch, evaluation, the results file), the epoch times and the loss from its HDF5 file,
the load average; the ratio this / baseline per round and the medians. A warm-up run of each
tree first (numba's kernel cache of a new source tree) is not counted. Holds the bench lock
(``/tmp/shardgnn-bench.lock``) for the whole measurement.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness
import numpy as np

LOCK = "/tmp/shardgnn-bench.lock"


def one(a: argparse.Namespace, ranks: int, src: str | None, tag: str) -> dict[str, Any]:
    """One run of the command with this tree (``src`` None) or the baseline's."""
    import h5py

    out = harness.ROOT / "work" / "bench" / f"wall_vs_{tag}_{ranks}_{os.getpid()}.h5"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = harness.shardgnn(["train", "--engine", "nau", "--model", a.model, a.data, "--epochs",
                            a.epochs, "--out", out, "--force", *a.extra], ranks=ranks)
    env = harness.bench_env({"PYTHONPATH": str(Path(src) / "src")} if src else None)
    rec = harness.timed(cmd, env=env)
    with h5py.File(out) as f:
        ep = f["train/epoch_time"][()].tolist()
        loss = f["train/loss"][()].tolist()
    out.unlink()
    return {"wall_s": rec["wall_s"], "cpu_s": rec["cpu_s"], "epoch_time": ep,
            "epoch_median_s": float(np.median(ep)), "loss": loss, "loadavg": rec["loadavg"],
            "cmd": rec["cmd"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--base-src", required=True, help="checkout of the baseline commit")
    ap.add_argument("--data", required=True, help="canonical dataset directory")
    ap.add_argument("--model", default="pinsage")
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:cut])
    a.extra = argv[cut + 1:]  # after --: more train options
    before = harness.loadavg()
    res: dict[str, Any] = {"args": vars(a), "base": harness.git_state(Path(a.base_src))}
    with open(LOCK, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        for p in map(int, a.ranks.split(",")):
            trees = {"this": None, "base": a.base_src}
            for tag, src in trees.items():
                one(a, p, src, tag)  # warm-up: numba's cache of each tree
            runs: dict[str, list[dict[str, Any]]] = {"this": [], "base": []}
            for r in range(a.rounds):
                for tag in (("this", "base") if r % 2 == 0 else ("base", "this")):
                    runs[tag].append(one(a, p, trees[tag], tag))
                    print(f"P{p} round {r} {tag} {runs[tag][-1]['wall_s']:.2f} s",
                          file=sys.stderr, flush=True)
            ratio = [t["wall_s"] / b["wall_s"] for t, b in zip(runs["this"], runs["base"])]
            res[f"P{p}"] = {
                "runs": runs, "wall_ratio_per_round": ratio,
                "wall_ratio_median": float(np.median(ratio)),
                "wall_median_s": {k: float(np.median([x["wall_s"] for x in v]))
                                  for k, v in runs.items()},
                "epoch_median_s": {k: float(np.median([x["epoch_median_s"] for x in v]))
                                   for k, v in runs.items()},
                "same_loss": all(np.allclose(t["loss"], b["loss"], rtol=1e-5, atol=1e-6)
                                 for t, b in zip(runs["this"], runs["base"]))}
    harness.write_result(Path(a.out), res, before)


if __name__ == "__main__":
    main()
