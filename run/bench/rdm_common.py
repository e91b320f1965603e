"""Helpers shared by the RDM benchmarks: mpiexec launching, dataset preparation, JSON output."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "datasets"


def mpiexec() -> str:
    local = Path(sys.executable).with_name("mpiexec")
    return str(local) if local.exists() else "mpiexec"


def launch(n: int, args: list[str], timeout: float = 3600) -> subprocess.CompletedProcess:
    """Run ``mpiexec -n N python -m mpi4py ARGS``; raise with the tail of stderr on failure."""
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
               SHARDGNN_PROGRESS="0")
    cmd = [mpiexec(), "-n", str(n), sys.executable, "-m", "mpi4py", *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


def planetoid(name: str, out: Path) -> Path:
    """Convert shared/datasets/NAME into OUT/NAME once."""
    d = out / name
    if not (d / "graph.json").exists():
        subprocess.run([sys.executable, "-m", "shardgnn", "convert", str(SHARED / name), "--out", str(d)],
                       check=True, capture_output=True)
    return d


def csbm(out: Path, nodes: int, features: int, classes: int = 8, degree: int = 10,
         homophily: float = 0.7, snr: float = 1.0, seed: int = 0) -> Path:
    """Generate a CSBM dataset once (through `shardgnn generate csbm`)."""
    d = out / f"csbm-{nodes}-{features}-{classes}-{degree}-{homophily}-{snr}"
    if not (d / "graph.json").exists():
        subprocess.run([sys.executable, "-m", "shardgnn", "generate", "csbm", "--nodes", str(nodes),
                        "--features", str(features), "--classes", str(classes),
                        "--avg-degree", str(degree), "--homophily", str(homophily),
                        "--feature-snr", str(snr), "--seed", str(seed), "--out", str(d)],
                       check=True, capture_output=True)
    return d


def write_json(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=float))
    os.replace(tmp, path)


def machine() -> dict:
    import platform

    return {"host": platform.node(), "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "note": "2 cores shared with other jobs; timings are medians and noisy"}
