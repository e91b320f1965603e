"""shardgnn: MPI-native training of graph neural networks on graphs larger than one machine.

Importing shardgnn never initialises MPI; :func:`shardgnn.comm.world` does.
"""
__version__ = "0.1.0"
