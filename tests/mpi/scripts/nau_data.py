"""A small typed (movie / user / actor) graph for the NAU MPI checks: in memory
(:func:`typed`) or as a canonical dataset folder with ``node_type.npy`` (:func:`write_typed`)."""
from pathlib import Path

import numpy as np


def typed_arrays(seed: int = 0, n_movie: int = 50, n_user: int = 30, n_actor: int = 12):
    """``(n, src, dst, node_type, x, y)``: ratings (movie -> user) and cast (movie -> actor)
    edges, 8 random features, 3 classes on the movies (-1 elsewhere)."""
    rng = np.random.default_rng(seed)
    n = n_movie + n_user + n_actor
    nt = np.repeat([0, 1, 2], [n_movie, n_user, n_actor])
    src = np.concatenate([rng.integers(0, n_movie, 160), rng.integers(0, n_movie, 60)])
    dst = np.concatenate([n_movie + rng.integers(0, n_user, 160),
                          n_movie + n_user + rng.integers(0, n_actor, 60)])
    y = np.where(nt == 0, rng.integers(0, 3, n), -1)
    return n, src, dst, nt, rng.standard_normal((n, 8)).astype(np.float32), y


def typed(seed: int = 0, **sizes):
    """The graph as a :class:`shardgnn.nau.graph.TypedGraph`."""
    from shardgnn.nau.graph import from_edges

    n, src, dst, nt, x, y = typed_arrays(seed, **sizes)
    return from_edges(n, src, dst, node_type=nt, node_type_names=("movie", "user", "actor"),
                      x=x, y=y, name="typed")


def write_typed(d: Path, seed: int = 0, **sizes) -> Path:
    """The graph as a canonical dataset in ``d`` (repeated edges once, ``node_type.npy``)."""
    from shardgnn.io.canonical import write_dataset

    n, src, dst, nt, x, y = typed_arrays(seed, **sizes)
    write_dataset(d, np.unique(np.stack([src, dst], 1), axis=0), n, x=x, y=y)
    np.save(Path(d) / "node_type.npy", nt)
    return Path(d)
