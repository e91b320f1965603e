"""The sampled engine (GLISP): data-parallel mini-batch training on a vertex-cut store, batches
from the Gather-Apply sampling service."""
