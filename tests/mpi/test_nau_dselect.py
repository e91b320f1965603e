"""Distributed PinSage walks (issue 36): the compiled walk steps of
:func:`shardgnn.nau.dselect.walk_topk` give the one-rank records at P = 1, 2, 4 (directed graph
with dead ends, hash and skewed owners, several rounds), and every step sends exactly the walk
rows that changed rank (``scripts/nau_dselect_checks.py``)."""
import json

import pytest

from conftest import SCRIPTS, run_mpi


@pytest.mark.parametrize("n", [1, 2, 4])
def test_walks_equal_one_rank_and_bytes_per_step(tmp_path, n):
    run_mpi(n, [SCRIPTS / "nau_dselect_checks.py", tmp_path], timeout=300, check=False)
    for r in range(n):
        fail = tmp_path / f"rank-{r}.fail"
        assert not fail.exists(), fail.read_text()
        assert (tmp_path / f"rank-{r}.ok").exists(), f"rank {r} did not finish"
    res = json.loads((tmp_path / "checks.json").read_text())
    assert len(res) == 2 * 3 * n
    for key, v in res.items():
        assert v["same"] and v["records"] > 0, (key, v)
        for step, b in v["expected_step_bytes"].items():
            assert v["sent"].get(step, 0) == b, (key, v)
        if n > 1 and "/h1/" not in key:
            assert sum(v["moved"].values()) > 0, (key, v)
    for key in {k.rsplit("/", 1)[0] for k in res}:
        home = sum(res[f"{key}/rank{r}"]["sent"].get("nau_walk_home", 0) for r in range(n))
        assert home <= res[f"{key}/rank0"]["home_bytes_max"], key
