"""NAU models: GCN, PinSage, MAGNN, JK-Net, P-GNN, one module each, registered by name in
:data:`shardgnn.registry.NAU_MODELS`. Rank-local."""
