"""shardgnn.train."""
