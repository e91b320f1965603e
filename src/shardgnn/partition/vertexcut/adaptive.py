"""AdaDNE's adaptive expansion factor per partition and iteration (a RECONSTRUCTION). Pure.

The GLISP paper's equations 5-7 were lost; these formulas are a reconstruction consistent
with its prose (see ``docs/vertexcut.md``), not the authors' equations:

* vertex score  S_V(i, t) = |V_i(t)| / mean_j |V_j(t)|
* edge score    S_E(i, t) = |E_i(t)| / mean_j |E_j(t)|
* combined      S(i, t)   = w_V * S_V(i, t) + w_E * S_E(i, t),   w_V + w_E = 1
* ``linear`` (the addendum's reconstruction):  lambda_i = clip(lambda / S, lambda_min, 1)
* ``exp`` (alternative response):             lambda_i = clip(lambda * exp(-beta (S - 1)), lambda_min, 1)

With S = 1 (a partition exactly at the mean) both give DistributedNE's constant lambda.
"""
from __future__ import annotations

import numpy as np

RESPONSES = ("linear", "exp")


def scores(vsize: np.ndarray, esize: np.ndarray, w_v: float, w_e: float) -> np.ndarray:
    """Combined score S(i) = w_V S_V + w_E S_E (1 where a mean is still zero).

    Called once per iteration on p-sized arrays, so written with few numpy calls.
    """
    v = np.asarray(vsize, dtype=np.float64)
    e = np.asarray(esize, dtype=np.float64)
    if v.size == 0:
        return v
    mv = v.sum() / v.size
    me = e.sum() / e.size
    sv = v / mv if mv > 0 else 1.0
    se = e / me if me > 0 else 1.0
    return w_v * sv + w_e * se + np.zeros(v.size)


def expansion_factors(vsize: np.ndarray, esize: np.ndarray, lam: float, w_v: float,
                      w_e: float, lam_min: float, response: str = "linear",
                      beta: float = 2.0) -> np.ndarray:
    """lambda_i(t) of every partition from current vertex and edge counts (reconstruction)."""
    s = scores(vsize, esize, w_v, w_e)
    if response == "linear":
        raw = lam / np.maximum(s, 1e-300)
        raw[s <= 0] = 1.0
    elif response == "exp":
        raw = lam * np.exp(-beta * (s - 1.0))
    else:
        raise ValueError(f"expected response in {RESPONSES}, got {response!r}")
    return np.minimum(np.maximum(raw, lam_min), 1.0)
