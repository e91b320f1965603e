"""shardgnn.partition.streaming."""
