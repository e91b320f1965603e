"""shardgnn.partition."""
