"""shardgnn.infer."""
