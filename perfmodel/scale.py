"""Scale-out simulation: RDM (best order per R_A choice) and CAGNET-1D over many P. Pure.

Bytes are the volume that crosses between ranks per epoch, summed over ranks: Alltoallv = bytes
sent to other ranks; broadcast = (P−1)·nbytes per call (receivers); all-reduce = 2(P−1)/P·nbytes
per rank (a ring). ``bytes_counted`` is what ``shardgnn.comm.Communicator`` books instead
(broadcast and all-reduce counted at full size on every rank).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from perfmodel.errors import PerfModelError
from perfmodel.exact import EngineSpec, Event, Problem, epoch_events
from perfmodel.orders import all_orders
from perfmodel.profile import Profile
from perfmodel.timing import cagnet_events, predict_cagnet, predict_rdm


def replica_choices(expr: str, P: int) -> list[int]:
    """Resolve ``P,P/2,4`` into valid R_A values for this P (dividing P, deduplicated)."""
    out: list[int] = []
    for tok in str(expr).replace(" ", "").split(","):
        if not tok:
            continue
        try:
            if tok.upper() == "P":
                r = P
            elif tok.upper().startswith("P/"):
                k = int(tok[2:])
                if k <= 0:
                    raise ValueError
                if P % k:
                    continue
                r = P // k
            else:
                r = int(tok)
        except ValueError:
            raise PerfModelError(f"replicas: expected P, P/k or integers, got {tok!r}") from None
        if 1 <= r <= P and P % r == 0 and r not in out:
            out.append(r)
    return out


def volume(events: Sequence[Event], P: int) -> tuple[int, int]:
    """(bytes crossing ranks, bytes the Communicator counts), summed over ranks."""
    moved = counted = 0
    for e in events:
        if e.bytes is None or P <= 1:
            continue
        c = int(np.sum(e.bytes))
        counted += c
        if e.kind == "redist":
            moved += c
        elif e.kind == "bcast":
            moved += (P - 1) * c // P
        elif e.kind == "allreduce":
            moved += 2 * (P - 1) * c // P
    return moved, counted


def scale_table(widths: Sequence[int], nodes: int, nnz: int, ranks: Sequence[int],
                replicas: str, profile: Profile, dtype: str | int = "float32",
                spec: EngineSpec | None = None) -> dict[str, Any]:
    """Rows per P: RDM per R_A (best predicted order, time, bytes) and CAGNET-1D."""
    spec = spec or EngineSpec()
    rows = []
    L = len(widths) - 1
    orders = list(all_orders(L))
    for P in ranks:
        row: dict[str, Any] = {"ranks": P, "rdm": []}
        for R in replica_choices(replicas, P):
            prob = Problem(list(widths), nodes, nnz, P, R, dtype)
            best = min(orders, key=lambda o: (predict_rdm(o, prob, profile, spec)["total"],
                                              str(o)))
            t = predict_rdm(best, prob, profile, spec)
            moved, counted = volume(epoch_events(best, prob, spec), P)
            row["rdm"].append({"replicas": R, "order": str(best), "seconds": t["total"],
                               "bytes": moved, "bytes_counted": counted})
        prob = Problem(list(widths), nodes, nnz, P, P, dtype)
        c = predict_cagnet(prob, profile, spec)
        moved, counted = volume(cagnet_events(prob, spec), P)
        row["cagnet1d"] = {"seconds": c["total"], "bytes": moved, "bytes_counted": counted}
        rows.append(row)
    return {"profile": profile.path, "features": list(widths), "nodes": nodes, "nnz": nnz,
            "dtype": str(dtype), "rows": rows}


def print_scale(table: dict[str, Any]) -> None:
    print(f"profile {table['profile']}; N = {table['nodes']}, nnz = {table['nnz']}, "
          f"features = {','.join(map(str, table['features']))}")
    print(f"{'P':>5} {'engine':<14} {'order':<10} {'epoch s':>10} {'GB/epoch':>10} "
          f"{'vs cagnet':>9}")
    for row in table["rows"]:
        cg = row["cagnet1d"]
        for r in row["rdm"]:
            ratio = cg["seconds"] / r["seconds"] if r["seconds"] > 0 else float("nan")
            print(f"{row['ranks']:>5} {'rdm R_A=' + str(r['replicas']):<14} {r['order']:<10} "
                  f"{r['seconds']:>10.4f} {r['bytes'] / 1e9:>10.3f} {ratio:>8.2f}x")
        print(f"{row['ranks']:>5} {'cagnet1d':<14} {'-':<10} {cg['seconds']:>10.4f} "
              f"{cg['bytes'] / 1e9:>10.3f}")


def write_scale_png(table: dict[str, Any], path: str) -> None:
    """Epoch time and bytes vs P (log-log), one line per engine / R_A choice."""
    from perfmodel.plots import _pyplot, _save

    plt = _pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
    ranks = [r["ranks"] for r in table["rows"]]
    labels = sorted({_rlabel(r, row["ranks"]) for row in table["rows"] for r in row["rdm"]},
                    key=lambda s: (len(s), s))
    for lab in labels:
        xs, ts, bs = [], [], []
        for row in table["rows"]:
            for r in row["rdm"]:
                if _rlabel(r, row["ranks"]) == lab:
                    xs.append(row["ranks"])
                    ts.append(r["seconds"])
                    bs.append(r["bytes"])
        line = ax.plot(xs, ts, marker="o", label=f"RDM {lab}")[0]
        keep = [(x, b) for x, b in zip(xs, bs) if x > 1]
        bx.plot([x for x, _ in keep], [b for _, b in keep], marker="o", color=line.get_color(),
                label=f"RDM {lab}")
    ax.plot(ranks, [r["cagnet1d"]["seconds"] for r in table["rows"]], marker="s", color="k",
            label="CAGNET-1D")
    many = [(r["ranks"], r["cagnet1d"]["bytes"]) for r in table["rows"] if r["ranks"] > 1]
    bx.plot([x for x, _ in many], [b for _, b in many], marker="s", color="k", label="CAGNET-1D")
    for a, yl in ((ax, "predicted epoch time (s)"), (bx, "bytes moved per epoch")):
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel("ranks P")
        a.set_ylabel(yl)
        a.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(f"features {','.join(map(str, table['features']))}, N = {table['nodes']}, "
                 f"nnz = {table['nnz']}", fontsize=9)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def _rlabel(r: dict[str, Any], P: int) -> str:
    k = P // r["replicas"]
    return "R_A=P" if k == 1 else f"R_A=P/{k}"
