"""Inputs shared by the RDM benchmarks: a converted Planetoid dataset and a generated CSBM graph,
each made once under the results folder, and the options every CSBM benchmark takes."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import harness


def planetoid(name: str, out: Path) -> Path:
    """Convert the shared dataset NAME into OUT/NAME once."""
    d = out / name
    if not (d / "graph.json").exists():
        harness.sh(harness.shardgnn(["convert", harness.dataset(name), "--out", d]), check=True)
    return d


def csbm(out: Path, nodes: int, features: int, classes: int = 8, degree: int = 10,
         homophily: float = 0.7, snr: float = 1.0, seed: int = 0) -> Path:
    """Generate a CSBM dataset once (through `shardgnn generate csbm`)."""
    d = out / f"csbm-{nodes}-{features}-{classes}-{degree}-{homophily}-{snr}"
    if not (d / "graph.json").exists():
        harness.sh([sys.executable, "-m", "shardgnn", "generate", "csbm", "--nodes", nodes,
                    "--features", features, "--classes", classes, "--avg-degree", degree,
                    "--homophily", homophily, "--feature-snr", snr, "--seed", seed, "--out", d],
                   check=True)
    return d


def csbm_parser(doc: str | None, nodes: int, features: int = 128,
                classes: int = 8) -> argparse.ArgumentParser:
    """A parser with RESULTS_DIR and the CSBM graph's --nodes / --features / --classes."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--nodes", type=int, default=nodes)
    ap.add_argument("--features", type=int, default=features)
    ap.add_argument("--classes", type=int, default=classes)
    return ap
