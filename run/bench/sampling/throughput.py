"""Benchmark of the Gather-Apply sampling service (issue 15): throughput, balance, memory.

Launch on P ranks over a vertex-cut store with p = P partitions (P = 4 oversubscribed is fine
for the balance figures)::

    mpiexec -n 2 python run/bench/sampling/throughput.py --store VPARTS --out run/bench/results/X.json

Measures, on the same random seeds (vertices with at least one edge, same on every rank):

* throughput: sampled edges per second per rank, uniform (O(k)), weighted A-ES, weighted with
  replacement and keyed, against the local single-process sampler
  (``shardgnn.sampling.neighbor.UniformNeighborSampler``) on the whole graph, run on every
  rank after the distributed part on the same batches (same fanouts, same batch size); each
  mode runs ``--repeats`` times, the modes interleaved, and its rate is the median;
* balance: max / mean over ranks of the server load (requests, edges returned) with
  Gather-Apply, against the DistDGL scheme (each vertex's whole one-hop request answered by its
  owner partition) computed exactly on the same request trace (the frontiers of every hop), on a
  hash edge-cut (``gid % p``) and on every ``--edgecut NAME=STORE`` edge-cut store of p parts
  (e.g. SPRING); the same with every seed taken from partition 0 (GLISP Fig. 10):
  ``partition0_seeds`` (vertices of AdaDNE partition 0) and ``NAME_partition0_seeds`` (vertices
  each edge-cut scheme gives to its partition 0: that scheme's worst case);
  for ``partition0_seeds`` also the loads per hop and the edges each rank returns in
  expectation under the exact uniform law for the same frontiers (``per_hop_expected_*``);
* memory: store bytes per edge, peak RSS per rank (before the local baseline loads the whole
  graph).

Weights for the weighted modes are ``1 + (u + v) % 4`` (R-MAT and the SNAP graphs have none).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run/bench: the shared harness
import harness
import shardgnn
from shardgnn.comm import peak_rss_bytes, world
from shardgnn.sampling.features import open_store
from shardgnn.sampling.service import GatherApplySampler


def _weights(i, part):
    s, d, _ = part.edges()
    return 1.0 + ((s + d) % 4)


def _degrees(store_meta_dataset: Path) -> np.ndarray:
    from shardgnn.io.canonical import edge_memmap, read_meta

    gm = read_meta(store_meta_dataset)
    e = np.asarray(edge_memmap(store_meta_dataset, gm))
    deg = np.bincount(e[:, 0], minlength=gm.num_nodes)
    if not gm.directed:
        deg = deg + np.bincount(e[:, 1], minlength=gm.num_nodes)
    return deg.astype(np.int64)


def _csr(dataset: Path):
    from shardgnn.io.canonical import edge_memmap, read_meta

    gm = read_meta(dataset)
    e = np.asarray(edge_memmap(dataset, gm), dtype=np.int64)
    s, d = (e[:, 0], e[:, 1]) if gm.directed else (np.concatenate([e[:, 0], e[:, 1]]),
                                                     np.concatenate([e[:, 1], e[:, 0]]))
    order = np.argsort(s, kind="stable")
    indptr = np.zeros(gm.num_nodes + 1, np.int64)
    np.cumsum(np.bincount(s, minlength=gm.num_nodes), out=indptr[1:])
    return indptr, d[order]


def _local_degrees(comm, sampler) -> np.ndarray:
    """(P, n) neighbours of every vertex held by each rank's partitions (the sampled side; all
    edge types). Collective over comm; a bench-only replicated matrix (8 P n bytes)."""
    loc = np.zeros((comm.size, sampler.num_nodes), np.int64)
    for sv in sampler.served:
        cnt = sv.gmeta[:, 1] - sv.gmeta[:, 0]
        lid = np.repeat(np.arange(sv.gptr.size - 1), np.diff(sv.gptr))
        np.add.at(loc[comm.rank], sv.global_id[lid], cnt)
    comm.allreduce(loc)
    return loc


def _expected_hop_load(trace, fanouts, locdeg):
    """(hops, P) expected edges returned per rank for the frontiers of ``trace`` under the exact
    uniform law: a frontier vertex v with global degree d sends each rank ``min(k, d) d_r / d``
    in expectation (the hypergeometric split of k over the local degrees d_r)."""
    deg = locdeg.sum(axis=0)
    out = np.zeros((len(fanouts), locdeg.shape[0]))
    for nodes in trace:
        for h, fr in enumerate(nodes):
            d = deg[fr].astype(np.float64)
            k = fanouts[h]
            take = d if k < 0 else np.minimum(d, k)
            frac = np.divide(take, d, out=np.zeros_like(d), where=d > 0)
            out[h] += (locdeg[:, fr] * frac).sum(axis=1)
    return out


def _run(comm, sampler, batches, fanouts, deg, p, owners, locdeg=None):
    """Sample this rank's batches; returns timing, edges and the DistDGL load of the trace
    under every edge-cut owner map of ``owners`` (name -> partition of each vertex); with
    ``locdeg`` (:func:`_local_degrees`) also the per-hop loads and their expectation."""
    comm.barrier()
    l0 = sampler.load.as_array().copy()
    h0 = [x.copy() for x in sampler.load.by_hop]
    dist_req = {k: np.zeros(p, np.int64) for k in owners}
    dist_ret = {k: np.zeros(p, np.int64) for k in owners}
    edges = 0
    t0 = time.perf_counter()
    trace = []
    for step, seeds in enumerate(batches):
        mb = sampler.sample(seeds, fanouts, step=step)
        edges += sum(b.num_edges for b in mb.hops)
        trace.append(mb.nodes[:-1])
    secs = time.perf_counter() - t0
    for nodes in trace:
        for h, fr in enumerate(nodes):
            k = fanouts[h]
            ret = deg[fr] if k < 0 else np.minimum(deg[fr], k)
            for name, owner in owners.items():
                own = owner[fr]
                dist_req[name] += np.bincount(own, minlength=p)
                dist_ret[name] += np.bincount(own, weights=ret, minlength=p).astype(np.int64)
    load = sampler.load.as_array() - l0
    by_hop = np.array([x - (h0[h] if h < len(h0) else 0)
                       for h, x in enumerate(sampler.load.by_hop)])
    comm.barrier()
    wall = time.perf_counter() - t0
    for name in owners:
        comm.allreduce(dist_req[name])
        comm.allreduce(dist_ret[name])
    loads = np.asarray(comm.allgather_obj(load.tolist()))
    rates = comm.allgather_obj(edges / secs if secs > 0 else 0.0)

    def bal(a):
        a = np.asarray(a, dtype=np.float64)
        return float(a.max() / a.mean()) if a.mean() > 0 else float("nan")

    return {"seconds_per_rank": comm.allgather_obj(secs), "wall_seconds": wall,
            "edges_per_rank": comm.allgather_obj(edges),
            "edges_per_s_per_rank": rates, "median_edges_per_s_per_rank": float(np.median(rates)),
            "ga_load_per_rank": loads.tolist(),
            "ga_balance_requests": bal(loads[:, 0]), "ga_balance_returned": bal(loads[:, 2]),
            "ga_balance_scanned": bal(loads[:, 1]),
            "distdgl": {name: {"requests_per_server": dist_req[name].tolist(),
                               "returned_per_server": dist_ret[name].tolist(),
                               "balance_requests": bal(dist_req[name]),
                               "balance_returned": bal(dist_ret[name])} for name in owners},
            "distdgl_balance_returned": bal(dist_ret["hash"]),
            **(_hop_balance(comm, by_hop, trace, fanouts, locdeg, bal) if locdeg is not None
               else {})}


def _hop_balance(comm, by_hop, trace, fanouts, locdeg, bal):
    """Per hop: (requests, scanned, returned) per rank, the expected returned per rank under
    the exact law for the same frontiers, and both balances. Collective over comm."""
    hops = np.asarray(comm.allgather_obj(by_hop.tolist()))  # (P, hops, 3)
    exp = _expected_hop_load(trace, fanouts, locdeg)
    comm.allreduce(exp)
    tot = exp.sum(axis=0)
    return {"per_hop_load_per_rank": hops.transpose(1, 0, 2).tolist(),
            "per_hop_balance_returned": [bal(hops[:, h, 2]) for h in range(hops.shape[1])],
            "per_hop_expected_returned_per_rank": exp.tolist(),
            "per_hop_expected_balance_returned": [bal(e) for e in exp],
            "expected_returned_per_rank": tot.tolist(),
            "expected_balance_returned": bal(tot)}


def _owners(spec: str, n: int, p: int) -> dict[str, np.ndarray]:
    """Edge-cut owner maps: ``hash`` (gid % p) and one per ``NAME=STORE`` edge-cut store of p
    partitions (a vertex's owner partition, as DistDGL sends its whole request there)."""
    from shardgnn.partition.store import open_store as open_edgecut

    owners = {"hash": np.arange(n, dtype=np.int64) % p}
    for item in filter(None, spec.split(",")):
        name, path = item.split("=")
        st = open_edgecut(path)
        own = np.full(n, -1, np.int64)
        for i in range(p):
            own[np.asarray(st.owned(i), dtype=np.int64)] = i
        owners[name] = np.where(own < 0, np.arange(n) % p, own)  # isolated: never requested
    return owners


def _batches(pool, rng, comm, a):
    """This rank's batches of seeds drawn from ``pool`` (the same draw on every rank)."""
    need = a.batch_size * a.batches * comm.size
    s = rng.choice(pool, size=min(need, pool.size), replace=False)
    return [np.sort(s[(i * comm.size + comm.rank) * a.batch_size:
                      (i * comm.size + comm.rank + 1) * a.batch_size]) for i in range(a.batches)]


def _local_baseline(comm, res, ds, fanouts, mine, seed, repeats):
    """The local single-process sampler on the whole graph, same batches, on every rank
    (``repeats`` timed runs, median)."""
    from shardgnn.sampling.neighbor import UniformNeighborSampler

    indptr, indices = _csr(ds)
    loc = UniformNeighborSampler(indptr, indices, fanouts)
    g = np.random.default_rng(seed)
    loc.sample(mine[0], g)
    secs = []
    for _ in range(max(repeats, 1)):  # the same samples each time
        g = np.random.default_rng(seed)
        t1 = time.perf_counter()
        ledges = sum(loc.sample(b, g).num_edges for b in mine)
        secs.append(time.perf_counter() - t1)
    lsec = float(np.median(secs))
    rates = comm.allgather_obj(ledges / lsec)
    res["local_baseline"] = {"edges_per_s_per_rank": rates, "repeats": max(repeats, 1),
                             "seconds_per_repeat_per_rank": comm.allgather_obj(secs),
                             "median_edges_per_s_per_rank": float(np.median(rates)),
                             "note": "union subgraph: each vertex sampled once (first hop that "
                                     "reaches it); Gather-Apply samples every vertex of every "
                                     "hop's node list (DGL message-flow graphs)"}
    for mode, r in res["modes"].items():
        r["ratio_to_local_baseline"] = r["median_edges_per_s_per_rank"] / float(np.median(rates))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--dataset", default=None)
    ap.add_argument("--fanouts", default="15,10,5")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=8, help="timed batches per rank")
    ap.add_argument("--repeats", type=int, default=3,
                    help="timed runs per mode, the modes interleaved (uniform, weighted, ..., "
                    "uniform, ...); rates are the median over the runs")
    ap.add_argument("--modes", default="uniform,weighted,wreplace,keyed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--edgecut", default="", help="NAME=STORE,...: edge-cut stores (e.g. SPRING) "
                    "of the same p for the DistDGL scheme (hash is always measured)")
    ap.add_argument("--balance-only", action="store_true",
                    help="skip the local baseline and the modes other than the first")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    load0 = harness.loadavg()
    comm = world()
    fanouts = [int(f) for f in a.fanouts.split(",")]
    store, ds = open_store(a.store, a.dataset)
    p = store.num_parts
    deg = _degrees(ds)
    rng = np.random.default_rng(a.seed)
    cand = np.flatnonzero(deg > 0)
    mine = _batches(cand, rng, comm, a)
    owners = _owners(a.edgecut, deg.size, p)
    res = {"store": str(a.store), "dataset": str(ds), "ranks": comm.size, "parts": p,
           "num_nodes": int(store.meta["num_nodes"]), "num_edges": int(store.meta["num_edges"]),
           "fanouts": fanouts, "batch_size": a.batch_size, "batches_per_rank": a.batches,
           "modes": {},
           "shardgnn_src": str(Path(shardgnn.__file__).parent)}  # a checkout other than HEAD
    t0 = time.perf_counter()
    samplers = {}
    for mode in a.modes.split(",")[:1] if a.balance_only else a.modes.split(","):
        kw = {"uniform": dict(mode="uniform"), "keyed": dict(mode="keyed"),
              "weighted": dict(mode="weighted", weights=_weights),
              "wreplace": dict(mode="weighted", replace=True, weights=_weights)}[mode]
        samplers[mode] = GatherApplySampler(comm, store, seed=a.seed, **kw)
    res["setup_seconds"] = time.perf_counter() - t0
    for mode, s in samplers.items():
        _run(comm, s, mine[:1], fanouts, deg, p, owners)  # warm-up (numba compile, page cache)
    runs: dict[str, list] = {mode: [] for mode in samplers}
    for _ in range(max(a.repeats, 1)):
        for mode, s in samplers.items():
            runs[mode].append(_run(comm, s, mine, fanouts, deg, p, owners))
    for mode, rs in runs.items():
        med = [r["median_edges_per_s_per_rank"] for r in rs]
        res["modes"][mode] = {**rs[int(np.argsort(med)[len(med) // 2])],
                              "repeat_median_edges_per_s_per_rank": med,
                              "median_edges_per_s_per_rank": float(np.median(med)),
                              "race_fallbacks_rank0_all_runs": int(samplers[mode].load.fallbacks)}
    u = res["modes"].get("uniform")
    for mode, r in res["modes"].items() if u else ():
        r["time_ratio_to_uniform_per_edge"] = (u["median_edges_per_s_per_rank"]
                                               / r["median_edges_per_s_per_rank"])
        r["repeat_time_ratio_to_uniform_per_edge"] = [
            x / y for x, y in zip(u["repeat_median_edges_per_s_per_rank"],
                                  r["repeat_median_edges_per_s_per_rank"])]
    s = samplers[next(iter(samplers))]
    locdeg = _local_degrees(comm, s)
    res["balance_expected_note"] = ("per_hop_expected_*: edges each rank returns in expectation "
                                    "for the same frontiers under the exact uniform law "
                                    "(min(k, d) d_r / d per frontier vertex)")
    # GLISP Fig. 10 worst case: every seed held by partition 0 (AdaDNE), and every seed owned
    # by partition 0 of each edge-cut scheme (that scheme's own worst case)
    p0 = np.flatnonzero(np.unpackbits(s.membership, axis=1, bitorder="little")[:, 0])
    res["partition0_seeds"] = _run(comm, s, _batches(p0, rng, comm, a), fanouts, deg, p, owners,
                                   locdeg)
    for name, owner in owners.items():
        pool = np.flatnonzero((owner == 0) & (deg > 0))
        res[f"{name}_partition0_seeds"] = _run(comm, s, _batches(pool, rng, comm, a), fanouts,
                                               deg, p, owners)
    sizes = sum(f.stat().st_size for f in Path(a.store).glob("part-*/*.npy"))
    res["store_bytes"] = int(sizes)
    res["store_bytes_per_edge"] = sizes / max(res["num_edges"], 1)
    res["store_bytes_per_stored_record"] = sizes / max(2 * res["num_edges"], 1)
    res["directory_bytes_per_rank"] = int(s.membership.nbytes)
    res["peak_rss_per_rank_before_baseline"] = comm.allgather_obj(peak_rss_bytes())
    if not a.balance_only:
        _local_baseline(comm, res, ds, fanouts, mine, a.seed, a.repeats)
    if comm.rank == 0:
        harness.write_result(Path(a.out), res, load0)
        rows = list(res["modes"].items()) + [(k, v) for k, v in res.items()
                                             if k.endswith("partition0_seeds")]
        print(json.dumps({m: {"edges/s/rank": r["median_edges_per_s_per_rank"],
                              "GA": r["ga_balance_returned"],
                              **{f"DistDGL-{k}": d["balance_returned"]
                                 for k, d in r["distdgl"].items()}} for m, r in rows}, indent=1))
        print("local", res.get("local_baseline", {}).get("median_edges_per_s_per_rank"),
              "bytes/edge", res["store_bytes_per_edge"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
