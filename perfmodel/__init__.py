"""perfmodel: the RDM analytical cost model (pure Python + numpy; no MPI, no torch)."""
