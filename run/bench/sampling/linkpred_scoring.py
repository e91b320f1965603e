"""Edge scoring by layerwise vs sample-wise inference (issue 35, benchmark (c); GLISP Fig. 13,
edge half) on the generated heterogeneous graph (>= 1 M edges): a `--task link` model (GraphSAGE
encoder + MLP decoder) trained briefly, then `shardgnn infer --score-edges` of every test edge,
once layerwise (every vertex embedded layer by layer, then the decoder over the stored rows) and
once sample-wise (`--samplewise batch`: each batch of edges' endpoints inferred from their own
sampled subgraphs, then the decoder), with the same fanouts (the same step-0 samples: the same
scores). The timed part holds `flock /tmp/shardgnn-bench.lock`; the JSON records the load.
One command (prepares the graph, store and model when missing)::

    python run/bench/sampling/linkpred_scoring.py --work /tmp/lp/score --test 0.98 \
        --out run/bench/results/sampling_linkpred_scoring_all.json

Two costs per mode, both in the JSON: ``engine``: layerwise = its whole run inside the engine
(`/infer` attr `total_time`: plan, sampler, all vertices through all layers, then the scoring,
which it includes); sample-wise = its scoring alone (`score_time`; its vertex pass is cut to
--target-fraction 0.001 and not counted, nor are its plan and sampler setup). ``command``:
the wall time of the whole `mpiexec ... shardgnn infer` command a user waits for (start-up,
imports, reading the checkpoint, writing the results), both modes alike, and its CPU
seconds (all ranks; less sensitive than the wall to other jobs on a shared machine).
"""
from __future__ import annotations

import argparse
import fcntl
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--targets", type=int, default=101_000,
                   help="hetero --targets (about 10 edges each, a few merged)")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--fanouts", default="10,5")
    p.add_argument("--test", type=float, default=0.1,
                   help="test fraction of the edges (0.98: every edge outside the 2%% trained on)")
    p.add_argument("--modes", default="batch,target", help="sample-wise modes to compare")
    p.add_argument("--batch-size", type=int, default=1024, help="edges per sample-wise batch")
    a = p.parse_args()
    load0 = harness.loadavg()
    w = Path(a.work)
    w.mkdir(parents=True, exist_ok=True)
    data, store = w / "data", w / "store"
    prep = []
    if not (data / "graph.json").exists():
        prep.append(harness.timed(harness.shardgnn(["generate", "hetero", "--targets", a.targets,
                                                    "--seed", 0, "--out", data])))
    if not (store / "meta.json").exists():
        prep.append(harness.timed(harness.shardgnn(["partition", data, "--algo", "adadne",
                                                    "--parts", a.ranks, "--out", store],
                                                   ranks=a.ranks)))
    ck = w / "model.ckpt.h5"
    split = f"{0.02},{0.0},{a.test}"
    if not ck.exists():
        prep.append(harness.timed(harness.shardgnn(
            ["train", "--engine", "sampled", store, "--task", "link", "--model", "sage",
             "--decoder", "mlp", "--hidden", 32, "--fanouts", a.fanouts, "--neg", 1,
             "--link-split", split, "--epochs", 1, "--batch-size", 2048, "--eval", "none",
             "--checkpoint-every", 1, "--checkpoint", ck, "--out", w / "train.h5", "--force"],
            ranks=a.ranks)))
    from shardgnn.io.canonical import read_meta
    from shardgnn.sampled.linkdata import load_link_data

    d = load_link_data(data, read_meta(data), None, [0.02, 0.0, a.test], None, 0, "uniform")
    te = d.split["test"]
    edges = np.column_stack([d.edges[te], d.rel[te].astype(np.int64)])
    np.save(w / "test-edges.npy", edges)
    runs = {}
    with open("/tmp/shardgnn-bench.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        modes = [("layerwise", ["--no-resume"])] + [
            (f"samplewise-{m}", ["--samplewise", m, "--target-fraction", "0.001",
                                 "--batch-size", a.batch_size]) for m in a.modes.split(",")]
        for mode, extra in modes:
            out = w / f"{mode}.h5"
            runs[mode] = harness.timed(harness.shardgnn(
                ["infer", ck, store, "--fanouts", a.fanouts, "--score-edges",
                 w / "test-edges.npy", "--out", out, "--force", *extra],
                ranks=a.ranks))
    import h5py

    got = {}
    for mode in runs:
        with h5py.File(w / f"{mode}.h5") as f:
            at = dict(f["infer"].attrs)
            got[mode] = {"scores": f["infer/scores"][()], "total_time": float(at["total_time"]),
                         "score_time": float(at["score_time"])}
    lw = got["layerwise"]
    lw_cost = lw["total_time"]   # includes its score_time
    lw_wall = runs["layerwise"]["wall_s"]
    res = {"benchmark": "linkpred_scoring", "graph": {"nodes": d.n, "edges": int(
        read_meta(data).num_edges), "edge_types": d.T}, "test_edges": int(edges.shape[0]),
        "ranks": a.ranks, "fanouts": a.fanouts, "samplewise_batch_edges": a.batch_size,
        "layerwise": {"infer_all_vertices_s": lw["total_time"] - lw["score_time"],
                      "score_s": lw["score_time"], "edge_scoring_cost_s": lw_cost,
                      "command_wall_s": lw_wall, "command_cpu_s": runs["layerwise"]["cpu_s"]},
        "runs": runs, "prep": prep}
    for mode, g in got.items():
        if mode == "layerwise":
            continue
        diff = np.abs(g["scores"] - lw["scores"])
        res[mode] = {"edge_scoring_cost_s": g["score_time"],
                     "speedup_layerwise": g["score_time"] / lw_cost if lw_cost else None,
                     "command_wall_s": runs[mode]["wall_s"],
                     "speedup_layerwise_command": runs[mode]["wall_s"] / lw_wall,
                     "command_cpu_s": runs[mode]["cpu_s"],
                     "speedup_layerwise_command_cpu": runs[mode]["cpu_s"] / runs["layerwise"][
                         "cpu_s"],
                     "scores_max_abs_diff": float(diff.max()) if diff.size else 0.0,
                     "scores_outside_rtol1e-5_atol1e-6": int(np.sum(
                         diff > 1e-5 * np.abs(lw["scores"]) + 1e-6))}
    harness.write_result(Path(a.out), res, load0)
    print(res["test_edges"], res["layerwise"],
          {m: res[m] for m in got if m != "layerwise"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
