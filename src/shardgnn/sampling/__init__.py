"""shardgnn.sampling."""
