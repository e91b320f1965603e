"""Install shardgnn: the library under src/, the perfmodel package, two console scripts.

All metadata (dependencies, extras, scripts, packages) lives in pyproject.toml; the version is
``shardgnn.__version__``. Kept so ``python setup.py ...`` and old tooling still work.
"""
from setuptools import setup

setup()
