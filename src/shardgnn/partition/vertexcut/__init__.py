"""shardgnn.partition.vertexcut."""
