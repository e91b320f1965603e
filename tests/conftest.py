"""Shared test fixtures: paths, and a launcher for multi-rank runs under mpiexec with a timeout."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INPUTS = ROOT / "inputs"          # bundled real graphs (cora, citeseer, facebook_combined)
DATASETS_ENV = "SHARDGNN_DATASETS"
SCRIPTS = Path(__file__).resolve().parent / "mpi" / "scripts"


def mpiexec_path() -> str:
    """mpiexec next to this Python (the venv's PyPI MPICH), else the one on PATH."""
    local = Path(sys.executable).with_name("mpiexec")
    if local.exists():
        return str(local)
    found = shutil.which("mpiexec")
    if not found:
        pytest.fail("mpiexec not found: install the `mpich` PyPI package into this environment")
    return found


def run_mpi(n: int, args: list[str], timeout: float = 120, module: str | None = None,
            cwd: str | os.PathLike | None = None, env: dict[str, str] | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
    """Run ``mpiexec -n N python -m mpi4py ARGS`` (or ``-m mpi4py -m MODULE ARGS``).

    Fails the test on timeout (a hang) and, with ``check``, on a non-zero exit.
    """
    cmd = [mpiexec_path(), "-n", str(n), sys.executable, "-m", "mpi4py"]
    if module:
        cmd += ["-m", module]
    cmd += [str(a) for a in args]
    e = dict(os.environ)
    e.setdefault("OMP_NUM_THREADS", "1")
    e["SHARDGNN_PROGRESS"] = "0"
    if env:
        e.update(env)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=e)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"mpiexec -n {n} {' '.join(map(str, args))} hung for {timeout}s:\n"
                    f"{(exc.stderr or b'')[-3000:]!r}")
    if check and proc.returncode != 0:
        pytest.fail(f"mpiexec -n {n} {' '.join(map(str, args))} exited {proc.returncode}\n"
                    f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}")
    return proc


def run_cli(n: int, args: list[str], timeout: float = 120, check: bool = True,
            **kw) -> subprocess.CompletedProcess:
    """Run the shardgnn command line on N ranks."""
    return run_mpi(n, args, timeout=timeout, module="shardgnn", check=check, **kw)


def optional_datasets() -> Path | None:
    """The directory of optional real datasets named by ``$SHARDGNN_DATASETS`` (None when unset)."""
    value = os.environ.get(DATASETS_ENV, "")
    return Path(value).resolve() if value else None


@pytest.fixture(scope="session")
def datasets() -> Path:
    """Optional real datasets (shared/datasets layout): skipped unless ``$SHARDGNN_DATASETS`` is set.

    The core of every feature is tested on the bundled graphs under ``inputs/``; these tests
    add the larger or differently shaped graphs when they are available.
    """
    d = optional_datasets()
    if d is None:
        pytest.skip(f"optional real datasets: set {DATASETS_ENV} to a shared/datasets directory")
    if not d.is_dir():
        pytest.fail(f"{DATASETS_ENV}={d}: not a directory")
    return d


@pytest.fixture(scope="session")
def cora_work(tmp_path_factory):
    """Cora converted (``cora``), cut into an edge-cut (``ec``, SPRING) and a vertex-cut store
    (``vc``, AdaDNE), both with 2 partitions, and a sampled-engine checkpoint of ``vc``
    (``s.h5.ckpt.h5``), made in this process on one rank."""
    from shardgnn.cli.main import main

    root = tmp_path_factory.mktemp("cora-work")
    for args in (["convert", INPUTS / "cora", "--out", root / "cora"],
                 ["partition", root / "cora", "--algo", "spring", "--parts", 2, "--out",
                  root / "ec"],
                 ["partition", root / "cora", "--algo", "adadne", "--parts", 2, "--out",
                  root / "vc"],
                 ["train", "--engine", "sampled", root / "vc", "--epochs", 1, "--hidden", 8,
                  "--fanouts", "5,5", "--checkpoint-every", 1, "--out", root / "s.h5"]):
        assert main([str(a) for a in args]) == 0, args
    return root


@pytest.fixture(scope="module")
def comm():
    """This process's world communicator (one rank under plain pytest)."""
    from shardgnn.comm import world

    return world()


@pytest.fixture(scope="module")
def cora(tmp_path_factory):
    """Cora written as a canonical dataset with seeded 5-column features, 3 classes and masks:
    (directory, normalised edges, |V|, features)."""
    import numpy as np

    from shardgnn.io.canonical import write_dataset
    from shardgnn.io.rawedges import normalise, raw_pairs

    edges, n = normalise(raw_pairs(INPUTS / "cora"))
    rng = np.random.default_rng(0)
    x = rng.random((n, 5)).astype(np.float32)
    y = rng.integers(0, 3, n)
    masks = {"train_mask": rng.random(n) < 0.5, "val_mask": rng.random(n) < 0.2,
             "test_mask": rng.random(n) < 0.3}
    d = tmp_path_factory.mktemp("cora")
    write_dataset(d, edges, n, x=x, y=y, masks=masks)
    return d, edges, n, x
