"""The averaging engine (CATGNN): partition-parallel training with model or gradient averaging
over an edge-cut store, exact distributed evaluation, GraphSAINT subgraphs per partition."""
