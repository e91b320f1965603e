"""shardgnn.io."""
