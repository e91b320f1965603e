"""shardgnn.rdm."""
