"""shardgnn: MPI-native training of graph neural networks on graphs larger than one machine.

Importing shardgnn never initialises MPI; :func:`shardgnn.comm.world` does. It points numba's
kernel cache at a writable folder when ``NUMBA_CACHE_DIR`` is unset (:mod:`shardgnn.jit`).
"""
__version__ = "0.1.0"

from shardgnn.jit import configure_cache as _configure_cache  # noqa: E402

_configure_cache()
