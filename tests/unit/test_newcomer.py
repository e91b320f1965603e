"""Small things a newcomer hits (issue 13 §9): a writable numba cache and a note while kernels
compile, and a quick start that says how to reach the installed command."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from conftest import ROOT
from shardgnn import jit


def test_numba_cache_dir_defaults_to_the_users_cache(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env["HOME"] = str(tmp_path)
    code = "import os, shardgnn, numba; print(os.environ['NUMBA_CACHE_DIR']); " \
           "print(numba.config.CACHE_DIR)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    want = str(tmp_path / ".cache" / "shardgnn" / "numba")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [want, want]
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "mine")   # the user's choice is kept
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split() == [str(tmp_path / "mine")] * 2


def test_compiling_note_only_when_slow(caplog):
    from shardgnn import log

    lg = log.get()
    lg.addHandler(caplog.handler)
    try:
        with jit.compiling("test kernels", after=0.05):
            time.sleep(0.3)
        with jit.compiling("quick kernels", after=5.0):
            pass
    finally:
        lg.removeHandler(caplog.handler)
    assert "compiling test kernels with numba (first run of this version only; cached in" \
        in caplog.text
    assert "compiled test kernels in" in caplog.text and "quick kernels" not in caplog.text


def test_quick_start_says_how_to_reach_the_command():
    readme = (ROOT / "README.md").read_text()
    quick = readme[readme.index("## Quick start"):]
    quick = quick[:quick.index("\n## ", 5)]
    assert "source .venv/bin/activate" in quick
    demo = (ROOT / "run" / "demo.sh").read_text().strip().splitlines()[-1]
    assert "$PWD/.venv/bin/shardgnn" in demo
