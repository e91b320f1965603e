"""FlexGraph's NAU abstraction: NeighborSelection / Aggregation / Update over hierarchical
dependency graphs, hybrid aggregation, models and a one-rank training engine. Rank-local."""
from shardgnn.nau.hdg import HDG, SchemaTree, from_records
from shardgnn.nau.layer import (HDGSet, LevelGraph, NAULayer, NAUModel, Records, aggregation,
                                neighbor_selection, per_vertex)

__all__ = ["HDG", "SchemaTree", "from_records", "HDGSet", "LevelGraph", "NAULayer", "NAUModel",
           "Records", "aggregation", "neighbor_selection", "per_vertex"]
