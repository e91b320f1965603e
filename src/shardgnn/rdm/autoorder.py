"""`--order auto|model`: choose the SpMM/GEMM order of an RDM run with the perfmodel.

* ``auto``: the Pareto set of the engine's orders on (bytes moved per training step, local SpMM
  work) from :mod:`perfmodel`; each candidate runs ``warmup`` + ``trials`` training steps (the
  RDM authors used three dry runs each) and the one with the smallest median step time is
  kept. Parameters and optimiser state are saved before the trials and restored after, so the
  run that follows is the same as one started with the chosen order.
* ``model``: the order with the smallest predicted step time from a machine profile
  (``SHARDGNN_PERFMODEL_PROFILE``, else ``cfg.profile`` when set, else the bundled
  ``perfmodel/machines/local-2core.toml``); no trials.

Both record the candidates, predictions, measured times and bytes, and the choice in the results
file under ``/perfmodel``. Collective over comm: every rank computes the same candidates, the
times are agreed (max over ranks) so every rank picks the same order.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable

import numpy as np

from perfmodel import exact, orders, profile, timing
from perfmodel.costs import pareto_front
from perfmodel.errors import PerfModelError
from shardgnn import log
from shardgnn.comm import Communicator
from shardgnn.errors import ShardError

DEFAULT_PROFILE = "local-2core"
WARMUP = 1
TRIALS = 3


def problem_of(comm: Communicator, tr: Any) -> dict[str, Any]:
    """N, nnz(Â), P, R_A, widths and item size of a Trainer's graph. Collective over comm."""
    g = tr.graph.grid
    nnz_panels = comm.allreduce_scalar(int(tr.graph.nnz), "sum")  # every panel R times
    return {"widths": list(tr.widths), "nodes": int(g.num_rows), "ranks": int(g.size),
            "replicas": int(g.replicas), "nnz": int(nnz_panels // g.replicas),
            "itemsize": int(tr.be.itemsize), "memo": bool(tr.memo), "bias": bool(tr.bias)}


def candidates(prob: dict[str, Any]) -> tuple[list[Any], dict[Any, dict[str, Any]]]:
    """The engine's Pareto orders on (training-step bytes, local SpMM work), and per-order
    model figures (bytes per kind, SpMM work) for every order. Pure."""
    pm = exact.Problem(prob["widths"], prob["nodes"], prob["nnz"], prob["ranks"],
                       prob["replicas"], prob["itemsize"])
    spec = exact.EngineSpec(memo=prob["memo"], bias=prob["bias"])
    figures: dict[Any, dict[str, Any]] = {}
    for o in orders.all_orders(len(prob["widths"]) - 1):
        ev = [e for e in exact.epoch_events(o, pm, spec) if e.phase not in ("eval", "metrics")]
        per_kind = exact.bytes_by_kind(ev, spec)
        comm_b = sum(int(np.max(v)) for k, v in per_kind.items() if k != "allreduce_grad")
        work = sum(e.nnz_width for e in ev if e.kind == "spmm")
        figures[o] = {"bytes": {k: [int(x) for x in v] for k, v in per_kind.items()},
                      "comm_bytes": comm_b, "spmm_work": float(work)}
    front = pareto_front({o: (f["comm_bytes"], f["spmm_work"]) for o, f in figures.items()})
    front.sort(key=lambda o: (figures[o]["comm_bytes"], figures[o]["spmm_work"], str(o)))
    return front, figures


def _profile_path(cfg: Any) -> str:
    return (os.environ.get("SHARDGNN_PERFMODEL_PROFILE") or getattr(cfg, "profile", None)
            or DEFAULT_PROFILE)


def predictions(prob: dict[str, Any], profile_name: str) -> tuple[dict[Any, float], str]:
    """Predicted step time of every order from a profile (empty when it cannot be loaded).
    Rank-local and deterministic."""
    try:
        prof = profile.load_profile(profile_name)
    except PerfModelError as exc:
        return {}, str(exc)
    pm = exact.Problem(prob["widths"], prob["nodes"], prob["nnz"], prob["ranks"],
                       prob["replicas"], prob["itemsize"])
    spec = exact.EngineSpec(memo=prob["memo"], bias=prob["bias"])
    out = {o: timing.predict_rdm(o, pm, prof, spec)["total"]
           for o in orders.all_orders(len(prob["widths"]) - 1)}
    return out, prof.path


def _snapshot(tr: Any) -> dict[str, Any]:
    return {"params": tr.params.clone(), "m": tr.adam_m.clone(), "v": tr.adam_v.clone(),
            "t": tr.adam_t, "step": tr.step_count, "order": tr.order}


def _restore(tr: Any, snap: dict[str, Any]) -> None:
    tr.params.copy_(snap["params"])
    tr.adam_m.copy_(snap["m"])
    tr.adam_v.copy_(snap["v"])
    tr.adam_t = snap["t"]
    tr.step_count = snap["step"]
    tr.grads.zero_()
    tr.set_order(snap["order"])


def time_order(comm: Communicator, tr: Any, order: Any, warmup: int = WARMUP,
               trials: int = TRIALS) -> dict[str, Any]:
    """Run ``warmup`` + ``trials`` training steps of ``order``; the slowest rank's time of
    each timed step and this rank's bytes per kind of the last one. Collective over comm."""
    tr.set_order(str(order))
    for _ in range(warmup):
        tr.train_step()
    times, last = [], {}
    for _ in range(trials):
        rec = tr.train_step()
        times.append(float(comm.allreduce_scalar(float(rec["time"]), "max")))
        last = rec["bytes"]
    return {"times": times, "median": float(np.median(times)), "bytes": dict(last)}


def choose_order(comm: Communicator, cfg: Any, trainer_factory: Callable[[], Any], mode: str = "auto",
                 writer: Any = None, warmup: int = WARMUP, trials: int = TRIALS) -> str:
    """Pick the order for this run (see module docstring); returns its 2L-letter string and
    leaves the trainer set to it with its state as before. Collective over comm."""
    mode = str(mode).lower()
    if mode not in ("auto", "model"):
        raise ShardError(f"--order: expected auto or model here, got {mode!r}")
    tr = trainer_factory()
    prob = problem_of(comm, tr)
    front, figures = candidates(prob)
    pred, prof_src = predictions(prob, _profile_path(cfg))
    lg = log.get()
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    if mode == "model":
        if not pred:
            raise ShardError(f"--order model: {prof_src}; run `shardgnn-perfmodel calibrate` "
                             f"or set SHARDGNN_PERFMODEL_PROFILE")
        choice = min(pred, key=lambda o: (pred[o], str(o)))
        for o in sorted(pred, key=lambda o: (pred[o], str(o))):
            rows.append(_row(o, o in front, pred.get(o), None, figures[o], None))
    else:
        snap = _snapshot(tr)
        measured: dict[Any, dict[str, Any]] = {}
        for o in front:
            measured[o] = time_order(comm, tr, o, warmup, trials)
            lg.info("order auto: %s  median %.4f s over %d steps (predicted %s)", o,
                    measured[o]["median"], trials,
                    f"{pred[o]:.4f} s" if o in pred else "n/a")
        _restore(tr, snap)
        choice = min(front, key=lambda o: (measured[o]["median"], str(o)))
        for o in front:
            rows.append(_row(o, True, pred.get(o), measured[o], figures[o], comm))
    tr.set_order(str(choice))
    lg.info("order %s: chose %s (%d candidates, %.1f s)", mode, choice, len(rows),
            time.perf_counter() - t0)
    if writer is not None:
        writer.attrs("perfmodel", {
            "mode": mode, "choice": str(choice), "candidates": [str(o) for o in front],
            "profile": prof_src if pred else "", "profile_error": "" if pred else prof_src,
            "warmup_steps": warmup if mode == "auto" else 0,
            "trial_steps": trials if mode == "auto" else 0,
            "selection_seconds": time.perf_counter() - t0, "nodes": prob["nodes"],
            "nnz": prob["nnz"], "ranks": prob["ranks"], "replicas": prob["replicas"],
            "widths": prob["widths"],
            "time_convention": "seconds of one training step (forward, backward, gradient "
                               "all-reduce, Adam), slowest rank; predicted from the profile"})
        writer.table("perfmodel/candidates", rows)
    return str(choice)


def _row(order: Any, pareto: bool, predicted: float | None, meas: dict[str, Any] | None,
         fig: dict[str, Any], comm: Communicator | None) -> dict[str, Any]:
    model_total = sum(sum(v) for v in fig["bytes"].values())
    row: dict[str, Any] = {
        "order": str(order), "forward": order.forward, "backward": order.backward,
        "pareto": float(pareto), "predicted_s": float("nan") if predicted is None else predicted,
        "model_bytes": float(model_total), "model_comm_bytes_max_rank": float(fig["comm_bytes"]),
        "model_spmm_work": fig["spmm_work"]}
    if meas is not None and comm is not None:   # measured rows come with their comm
        row["measured_s"] = meas["median"]
        for i, v in enumerate(meas["times"]):
            row[f"trial{i + 1}_s"] = v
        local = int(sum(meas["bytes"].values()))
        row["measured_bytes"] = float(comm.allreduce_scalar(local, "sum"))
    return row
