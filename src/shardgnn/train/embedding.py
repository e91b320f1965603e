"""Learnable vertex embeddings sharded by owner rank, with sparse optimisers (DistDGL's
``DistEmbedding`` with ``SparseAdam`` / ``SparseAdagrad``). Collective over comm where said.

Each rank stores only the rows of the vertices it owns (the same owner map as the feature
rows, :func:`shardgnn.sampling.features.owner_ranks`) and their optimiser state. A step
fetches the rows of its batch's input vertices from their owners (like features), the model
computes their gradients, and :meth:`ShardedEmbedding.push_grads` sends every gradient row to
its owner, which sums the rows of the same vertex (from several ranks), divides by the global
count and updates only those rows (lazy: rows without a gradient keep their state, as in
DGL). Adam keeps a step count per row (DGL's ``SparseAdam``). The initial rows are keyed by
(seed, vertex), so P ranks start from the table one rank starts from, and the update of a row
depends only on its summed gradient: P ranks train the table one rank trains, up to the float
summation order of the gradient sum.
"""
from __future__ import annotations

import numba
import numpy as np

from shardgnn.comm import Communicator
from shardgnn.sampling.features import VertexData
from shardgnn.keyed import draw01, vertex_key

OPTIMIZERS = ("adam", "adagrad")
#: Salt of the initial rows' streams.
INIT_SALT = 0xE3B
_B1, _B2, _EPS = 0.9, 0.999, 1e-8


@numba.njit(cache=True)
def keyed_rows(gids: np.ndarray, dim: int, seed: int, scale: float) -> np.ndarray:
    """(len(gids), dim) float32 rows uniform in (-scale, scale), row of vertex v a function of
    (seed, v) alone."""
    out = np.empty((gids.shape[0], dim), np.float32)
    for i in range(gids.shape[0]):
        key = vertex_key(seed, 0, 0, gids[i], INIT_SALT)
        for c in range(dim):
            out[i, c] = np.float32((2.0 * draw01(key, c) - 1.0) * scale)
    return out


class ShardedEmbedding(VertexData):
    """This rank's rows of an (n, dim) embedding table and their optimiser state.

    :meth:`fetch` (inherited) returns rows of any vertices; :meth:`push_grads` applies one
    sparse step. Both are collective over comm.
    """

    def __init__(self, comm: Communicator, owner: np.ndarray, dim: int, seed: int,
                 optimizer: str = "adam", lr: float = 0.01) -> None:
        self.comm = comm
        self.owner = owner
        self.owned = np.flatnonzero(owner == comm.rank).astype(np.int64)
        self.dim, self.lr, self.optimizer = int(dim), float(lr), optimizer
        self.rows = keyed_rows(self.owned, self.dim, int(seed), 1.0 / np.sqrt(max(dim, 1)))
        self.seconds = 0.0
        k = self.owned.size
        self.state: dict[str, np.ndarray] = (
            {"m": np.zeros((k, dim), np.float32), "v": np.zeros((k, dim), np.float32),
             "step": np.zeros(k, np.int64)} if optimizer == "adam"
            else {"sum": np.zeros((k, dim), np.float32)})

    def push_grads(self, gids: np.ndarray, grads: np.ndarray, total: float) -> int:
        """Send gradient rows of ``gids`` to their owners; each owner sums the rows of a vertex
        in source-rank order, divides by ``total`` and updates those rows. Returns the number
        of rows this rank updated. Collective over comm."""
        comm = self.comm
        gids = np.asarray(gids, np.int64)
        dest = self.owner[gids]
        order = np.argsort(dest, kind="stable")
        scount = np.bincount(dest, minlength=comm.size).astype(np.int64)
        rcount = comm.alltoall_counts(scount)
        ids = comm.alltoallv(np.ascontiguousarray(gids[order]), scount, recvcounts=rcount,
                             op_name="embedding_grad")
        g = comm.alltoallv(np.ascontiguousarray(np.asarray(grads, np.float32)[order]), scount,
                           recvcounts=rcount, op_name="embedding_grad")
        if ids.size == 0:
            return 0
        uniq, inv = np.unique(ids, return_inverse=True)
        acc = np.zeros((uniq.size, self.dim), np.float32)
        np.add.at(acc, inv, g.reshape(-1, self.dim))
        acc *= np.float32(1.0 / total) if total > 0 else np.float32(0.0)
        self._step(np.searchsorted(self.owned, uniq), acc)
        return int(uniq.size)

    def _step(self, rows: np.ndarray, g: np.ndarray) -> None:
        """The sparse optimiser's update of ``rows`` (local indices) with gradients ``g``."""
        st, lr = self.state, self.lr
        if self.optimizer == "adam":
            step = st["step"][rows] + 1
            st["step"][rows] = step
            m = _B1 * st["m"][rows] + (1 - _B1) * g
            v = _B2 * st["v"][rows] + (1 - _B2) * g * g
            st["m"][rows], st["v"][rows] = m, v
            mh = m / (1 - _B1 ** step)[:, None]
            vh = v / (1 - _B2 ** step)[:, None]
            self.rows[rows] -= (lr * mh / (np.sqrt(vh) + _EPS)).astype(np.float32)
        else:
            s = st["sum"][rows] + g * g
            st["sum"][rows] = s
            self.rows[rows] -= (lr * g / (np.sqrt(s) + 1e-10)).astype(np.float32)

    def table(self) -> dict[str, np.ndarray] | None:
        """The whole table and optimiser state in global-id order on rank 0 (None elsewhere):
        ``rows`` (n, dim) and the state arrays. Collective over comm."""
        comm = self.comm
        ids = comm.gatherv(self.owned)
        out: dict[str, np.ndarray] = {}
        for name, arr in [("rows", self.rows)] + sorted(self.state.items()):
            flat = np.ascontiguousarray(arr.reshape(arr.shape[0], -1))
            got = comm.gatherv(flat)
            if ids is not None and got is not None:
                full = np.empty((self.owner.size, flat.shape[1]), flat.dtype)
                full[ids] = got.reshape(-1, flat.shape[1])
                out[name] = full if arr.ndim == 2 else full[:, 0]
        return out if comm.rank == 0 else None

    def load(self, table: dict[str, np.ndarray]) -> None:
        """Take this rank's rows and state from a whole table (:meth:`table`'s layout)."""
        self.rows = np.ascontiguousarray(np.asarray(table["rows"])[self.owned], np.float32)
        for k in self.state:
            self.state[k] = np.ascontiguousarray(np.asarray(table[k])[self.owned])
