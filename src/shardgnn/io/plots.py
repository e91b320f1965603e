"""PNG plots of results files (matplotlib, imported only when a plot is asked for). Rank-local."""
from __future__ import annotations

import os

import numpy as np

from shardgnn.errors import ShardError, input_error
from shardgnn.io import outputs


def plot_training(results: str | os.PathLike, png: str | os.PathLike) -> None:
    """Draw /train loss and accuracies per epoch of ``results`` into ``png``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ShardError("--plot needs matplotlib: pip install matplotlib") from None
    import h5py

    with h5py.File(results, "r") as f:
        if "train" not in f or "epoch" not in f["train"]:
            raise input_error(results, "expected per-epoch data under /train (a training run), got none")
        g = f["train"]
        epoch = np.asarray(g["epoch"])
        series = {k: np.asarray(g[k]) for k in g if k.endswith("acc") or k == "loss"
                  if g[k].shape == epoch.shape}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for k, v in series.items():
        (ax2 if k == "loss" else ax1).plot(epoch, v, label=k)
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("accuracy")
    ax1.legend()
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("loss")
    ax2.legend()
    fig.tight_layout()
    try:
        with outputs.atomic_file(png, suffix=".png") as tmp:
            # the marker that tells a later --force this PNG is shardgnn's own
            fig.savefig(tmp, dpi=100, metadata={"Software": "shardgnn"})
    finally:
        plt.close(fig)
