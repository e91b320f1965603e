"""Redistribution of an RDM matrix between the row and column layouts: a planned Alltoallv inside
the rank's row group. Collective over the row-group communicator when called.

A :class:`Redistribution` is built once per (grid, width, direction) and called every time that
matrix changes layout (as PyFR's ``mpiutil.Scatterer`` plans its exchange once): the Alltoallv
counts and displacements, the column blocks to pack and unpack and the tile shapes come from the
pure grid (:func:`perfmodel.layout.resplit_counts`) at construction; a call only packs,
exchanges through :meth:`shardgnn.comm.Communicator.alltoallv` and unpacks.
"""
from __future__ import annotations

import numpy as np
import torch

from perfmodel.engine_schedule import OTHER
from perfmodel.layout import Grid, resplit_counts
from shardgnn.comm import Communicator


class Redistribution:
    """One planned layout change of an N × ``width`` matrix on ``rank``: ``src`` (``row`` or
    ``col``) to the other layout.

    Parameters
    ----------
    comm
        The rank's row group (the R ranks of its panel, in position order; R = ``comm.size``).
    grid
        The process grid (``grid.replicas == comm.size``).
    rank
        This rank's number in the world grid.
    width
        Columns of the matrix.
    src
        Layout of the input tile: ``row`` (row -> col) or ``col`` (col -> row).

    Attributes
    ----------
    send_counts, recv_counts, send_displs, recv_displs
        Alltoallv elements per row-group member and their offsets (planned once).
    in_shape, out_shape
        Local tile shapes before and after.
    """

    def __init__(self, comm: Communicator, grid: Grid, rank: int, width: int, src: str) -> None:
        if src not in OTHER:
            raise ValueError(f"expected src row or col, got {src!r}")
        if comm.size != grid.replicas:
            raise ValueError(f"expected a row-group communicator of R = {grid.replicas} ranks, "
                             f"got {comm.size}")
        self.comm, self.src, self.width = comm, src, int(width)
        self.send_counts, self.recv_counts = resplit_counts(grid, self.width, rank, src)
        self.send_displs = np.concatenate([[0], np.cumsum(self.send_counts)[:-1]]).astype(np.int64)
        self.recv_displs = np.concatenate([[0], np.cumsum(self.recv_counts)[:-1]]).astype(np.int64)
        # The largest send or receive total of any member: known to every rank from the grid, so
        # the exchange needs no agreement on it.
        members = grid.group_members(rank)
        self.max_total = max(int(c.sum()) for m in members
                             for c in resplit_counts(grid, self.width, m, src))
        self.col_blocks = [grid.col_range(self.width, m) for m in members]
        self.in_shape = grid.tile_shape(src, self.width, rank)
        self.out_shape = grid.tile_shape(OTHER[src], self.width, rank)

    def __call__(self, x: torch.Tensor, op_name: str = "redistribute") -> torch.Tensor:
        """The tile of ``x`` (this rank's ``src`` tile) in the other layout; bytes sent to other
        ranks are counted under ``op_name``. Collective over the row group."""
        if tuple(x.shape) != tuple(self.in_shape):
            raise ValueError(f"expected a {self.src} tile of shape {self.in_shape}, got {tuple(x.shape)}")
        if self.src == "row":
            send = (torch.cat([x[:, c0:c1].reshape(-1) for c0, c1 in self.col_blocks])
                    if x.numel() else x.reshape(-1))
        else:
            send = x.reshape(-1)
        recv = torch.empty(int(self.recv_counts.sum()), dtype=x.dtype, device=x.device)
        self.comm.alltoallv(send.contiguous(), self.send_counts, recv, self.recv_counts,
                            op_name=op_name, displs=(self.send_displs, self.recv_displs),
                            max_total=self.max_total)
        if self.src == "row":
            return recv.view(self.out_shape)
        out = torch.empty(self.out_shape, dtype=x.dtype, device=x.device)
        rows = self.out_shape[0]
        for (c0, c1), off, n in zip(self.col_blocks, self.recv_displs, self.recv_counts):
            out[:, c0:c1] = recv[int(off):int(off) + int(n)].view(rows, c1 - c0)
        return out
