"""Install shardgnn: the library under src/, the perfmodel package, two console scripts."""
from setuptools import find_packages, setup

setup(
    name="shardgnn",
    version="0.1.0",
    description="MPI-native training of graph neural networks on graphs larger than one machine",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    package_dir={"": "src", "perfmodel": "perfmodel"},
    packages=find_packages("src") + ["perfmodel"],
    package_data={"perfmodel": ["machines/*.toml"]},
    install_requires=[
        "numpy>=1.24",
        "scipy>=1.10",
        "h5py>=3.8",
        "mpi4py>=4.0",
        "torch>=2.2",
        "numba>=0.58",
        "tqdm>=4.60",
        "torch-geometric>=2.4",
        "tomli>=2.0; python_version<'3.11'",
    ],
    extras_require={
        "mpich": ["mpich"],
        "openmpi": ["openmpi"],
        "test": ["pytest>=7", "matplotlib"],
        "gpu": ["cupy-cuda12x"],
        "bench": ["pymetis", "matplotlib"],
        "plot": ["matplotlib"],
    },
    entry_points={
        "console_scripts": [
            "shardgnn=shardgnn.cli.main:main",
            "shardgnn-perfmodel=perfmodel.cli:main",
        ]
    },
)
