"""The test tree itself: pytest's default import mode needs unique test-module basenames."""
from collections import Counter
from pathlib import Path


def test_test_module_basenames_are_unique():
    tests = Path(__file__).resolve().parents[1]
    names = Counter(p.name for p in tests.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
