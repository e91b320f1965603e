"""perfmodel stays a pure model: importable without torch or mpi4py, no shardgnn import at module level."""
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_perfmodel_imports_without_torch_and_mpi4py():
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'mpi4py'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Block())\n"
        "import pkgutil, importlib, perfmodel\n"
        "for m in pkgutil.iter_modules(perfmodel.__path__):\n"
        "    importlib.import_module('perfmodel.' + m.name)\n"
        "bad = sorted(k for k in sys.modules if k.split('.')[0] in ('torch', 'mpi4py', 'shardgnn'))\n"
        "print('LOADED', bad)\n"
        "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "LOADED []" in proc.stdout


def test_perfmodel_has_no_module_level_shardgnn_import():
    offenders = []
    for py in sorted((ROOT / "perfmodel").glob("*.py")):
        tree = ast.parse(py.read_text())
        for node in tree.body:   # module level only; imports inside functions are allowed
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.If):   # `if TYPE_CHECKING:` blocks count too
                names = [n.module or "" for n in ast.walk(node) if isinstance(n, ast.ImportFrom)]
            offenders += [f"{py.name}: {n}" for n in names if n.split(".")[0] == "shardgnn"]
    assert offenders == []
