"""shardgnn.cli."""
