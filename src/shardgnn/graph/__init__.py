"""shardgnn.graph."""
