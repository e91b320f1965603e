"""The `shardgnn` subcommands and their one-line help: the single source that both the top-level
``--help`` (which lists them without importing any command, so it does not load torch) and each
command's own parser read. No communication."""
from __future__ import annotations

from shardgnn.registry import ENGINES

#: Subcommand modules under shardgnn.cli, in --help order, with their one-line help.
SUMMARY = {
    "convert": "convert an edge list / Planetoid / OGB / PyG / array to canonical form",
    "info": "counts and degree statistics of a converted dataset",
    "generate": "write synthetic graphs (R-MAT, CSBM, heterogeneous)",
    "partition": "partition a dataset (SPRING, HDRF, DBH, Greedy, 2PS-L, Hash, AdaDNE, DNE)",
    "train": f"train a GNN (engines: {', '.join(ENGINES)})",
    "sample": "dump Gather-Apply sampled blocks of seeds (vertex-cut store)",
    "infer": "layerwise inference of every vertex's embedding (GLISP)",
    "inspect": "print a results HDF5 file (or --json for scripts)",
    "export": "write a trained model or a partition store for PyTorch Geometric",
    "run": "run a job file's stages (convert or generate, partition, train, infer) in one "
           "launch",
}
COMMANDS = tuple(SUMMARY)
