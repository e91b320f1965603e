"""PNG of the Pareto front (communication vs sparse ops, every order labelled). Pure + matplotlib."""
from __future__ import annotations

from typing import Any, Sequence

from perfmodel.costs import OrderCost
from perfmodel.errors import PerfModelError


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PerfModelError("plot: matplotlib is not installed (pip install matplotlib, or "
                             "pip install shardgnn[plot])") from None
    return plt


def _save(fig: Any, path: str) -> None:
    """Write ``fig`` to ``path`` as PNG under a temporary name, then rename."""
    import os
    from pathlib import Path

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f"{p.stem}.tmp-{os.getpid()}{p.suffix}")
    fig.savefig(tmp, dpi=120)
    os.replace(tmp, p)


def pareto_png(costs: Sequence[OrderCost], widths: Sequence[int], path: str) -> None:
    """Scatter all orders, join the Pareto front, label each point with its order string."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 5))
    other = [c for c in costs if not c.pareto]
    front = sorted((c for c in costs if c.pareto), key=lambda c: (c.comm_units, c.sparse_units))
    ax.scatter([c.comm_units for c in other], [c.sparse_units for c in other], color="0.6",
               s=18, label="dominated")
    ax.plot([c.comm_units for c in front], [c.sparse_units for c in front], "o-", color="C3",
            label="Pareto front")
    # orders sharing a point get one combined label
    labels: dict[tuple[int, int], list[str]] = {}
    for c in costs:
        tid = c.order.table4_id()
        name = f"{c.order.forward}:{c.order.backward}" + (f" ({tid})" if tid is not None else "")
        labels.setdefault((c.comm_units, c.sparse_units), []).append(name)
    many = len(labels) > 40
    for (x, y), names in labels.items():
        on_front = any(c.pareto for c in costs if (c.comm_units, c.sparse_units) == (x, y))
        if many and not on_front:
            continue
        ax.annotate(", ".join(names), (x, y), fontsize=6 if not on_front else 7,
                    xytext=(3, 3), textcoords="offset points",
                    color="C3" if on_front else "0.35")
    ax.set_xlabel("communication (Σ widths redistributed; × (P−1)/P·N elements)")
    ax.set_ylabel("sparse ops (Σ SpMM widths; × nnz)")
    ax.set_title(f"RDM orders, features {','.join(map(str, widths))}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
