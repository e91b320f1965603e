"""`shardgnn sample` end to end: bad inputs give one line on every rank (exit 2 from the real
command line), and the dump is the same file content at P = 1 and 2."""
import shutil
import sys

import h5py
import numpy as np
import pytest

from conftest import SCRIPTS, run_cli, run_mpi
from shardgnn.io.canonical import write_dataset

sys.path.insert(0, str(SCRIPTS))


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    w = tmp_path_factory.mktemp("sample-cli")
    rng = np.random.default_rng(1)
    n = 120
    e = np.unique(np.sort(rng.integers(0, n - 5, (400, 2)), axis=1), axis=0)
    e = e[e[:, 0] != e[:, 1]]
    mask = np.zeros(n, bool)
    mask[::3] = True
    write_dataset(w / "data", e, n, x=rng.normal(size=(n, 4)), y=rng.integers(0, 3, n),
                  masks={"train_mask": mask, "val_mask": ~mask, "test_mask": ~mask})
    write_dataset(w / "other", e[:-3], n + 1)
    (w / "bad.txt").write_text(f"3\n{n + 4}\n")
    run_mpi(2, [SCRIPTS / "sampling_store.py", w / "data", w / "store", "4"])
    run_mpi(2, [SCRIPTS / "sampling_store.py", w / "data", w / "tstore", "4", "typed"])
    np.save(w / "edges.npy", e)
    wt = rng.integers(0, 3, len(e)).astype(np.float32)  # weight 0: never sampled
    write_dataset(w / "wdata", e, n, edge_weights=wt,
                  masks={"train_mask": mask, "val_mask": ~mask, "test_mask": ~mask})
    np.save(w / "wt.npy", np.concatenate([e, wt[:, None]], axis=1))
    run_mpi(2, [SCRIPTS / "sampling_store.py", w / "wdata", w / "wstore", "4"])
    shutil.copytree(w / "store", w / "broken")
    shutil.rmtree(w / "broken" / "part-00001")
    return w


def test_bad_inputs_one_line_on_every_rank(work):
    run_mpi(2, [SCRIPTS / "sampling_errors.py", work])
    got = [dict(line.split("\t", 1) for line in (work / f"errors-{r}.txt").read_text().splitlines())
           for r in range(2)]
    assert got[0] == got[1]
    want = {"fanouts": "--fanouts", "fanouts0": "--fanouts", "range": "expected seed ids in",
            "other": "expected the store's graph", "missing": "missing partition folder",
            "weights": "no edge weights", "nomask": "nosuch_mask.npy", "types": "--type-fanouts"}
    for k, frag in want.items():
        assert frag in got[0][k] and "\n" not in got[0][k], (k, got[0][k])
    proc = run_cli(2, ["sample", work / "store", "--mask", "train", "--fanouts", "5,x", "--out",
                       work / "x.h5"], check=False)
    assert proc.returncode == 2
    # one line per rank (the two ranks' lines may interleave on the shared stderr pipe)
    assert proc.stderr.count("shardgnn: error: rank") == 2
    assert proc.stderr.count("--fanouts: expected comma-separated integers") == 2
    assert not (work / "x.h5").exists()


def _dumps(work, name, args):
    """`shardgnn sample ARGS --out WORK/NAME{P}.h5` at P = 1 and 2: per P, every column of the
    dump (name -> array), the /sample attributes and the load's shape."""
    outs = {}
    for P in (1, 2):
        out = work / f"{name}{P}.h5"
        run_cli(P, ["sample", *args, "--out", out])
        with h5py.File(out) as f:
            cols = {}
            f["sample"].visititems(lambda k, o: cols.__setitem__(k, o[()])
                                   if isinstance(o, h5py.Dataset) and k != "load" else None)
            outs[P] = (cols, dict(f["sample"].attrs), f["sample/load"].shape)
    return outs


def test_dump_same_at_P1_and_P2(work):
    """The same columns at P = 1 and 2 (P = 2 interleaves the ranks' batches, put back in
    batch order); format 2: int32 columns, no edge type column on an untyped graph, each
    batch's rows together and ascending."""
    dumps = _dumps(work, "s", [work / "store", "--mask", "train", "--fanouts", "4,-1",
                               "--batch-size", "7", "--seed", "3"])
    outs = {P: d[0] for P, d in dumps.items()}
    for P, (_, attrs, load) in dumps.items():
        assert load == (P, 3)
        assert attrs["format_version"] == 2 and attrs["batches"] > 2
        assert not any(k.endswith("etype") for k in outs[P])
        assert {k for k in outs[P] if k.startswith("hop-1/")} == {
            f"hop-1/{c}" for c in ("batch", "dst", "src", "dst_lid", "src_lid")}
        assert all(v.dtype == np.int32 for v in outs[P].values())
        for g in ("nodes-0", "nodes-2", "hop-0", "hop-1"):
            assert np.all(np.diff(outs[P][f"{g}/batch"]) >= 0), g
    assert outs[1].keys() == outs[2].keys()
    for k in outs[1]:
        assert np.array_equal(outs[1][k], outs[2][k]), k


def test_dump_typed_graph_keeps_edge_types(work):
    """With --type-fanouts the dump has the etype column (the sampled edges' types), the same
    at P = 1 and 2."""
    e = np.load(work / "edges.npy")
    types = {(int(a), int(b)): int((a + b) % 2) for a, b in e}
    types.update({(b, a): t for (a, b), t in types.items()})
    outs = {P: d[0] for P, d in _dumps(work, "t", [
        work / "tstore", "--mask", "train", "--fanouts", "3,2", "--type-fanouts", "0:3,2 1:2,1",
        "--batch-size", "9"]).items()}
    for P in (1, 2):
        for h in (0, 1):
            got = [types[(int(d), int(s))] for d, s in zip(outs[P][f"hop-{h}/dst"],
                                                         outs[P][f"hop-{h}/src"])]
            assert outs[P][f"hop-{h}/etype"].tolist() == got
    for k in outs[1]:
        assert np.array_equal(outs[1][k], outs[2][k]), k


def test_weighted_from_stored_weights(work):
    ew = np.load(work / "wt.npy")
    zero = {(int(a), int(b)) for a, b, x in ew if x == 0}
    zero |= {(b, a) for a, b in zero}
    assert (work / "wstore" / "part-00000" / "out_weight.npy").exists()
    outs = {}
    for P in (1, 2):
        out = work / f"w{P}.h5"
        run_cli(P, ["sample", work / "wstore", "--mask", "train", "--fanouts", "3,2",
                    "--mode", "weighted", "--batch-size", "9", "--out", out])
        with h5py.File(out) as f:
            outs[P] = [f[f"sample/hop-{h}/{c}"][()] for h in (0, 1) for c in ("dst", "src")]
    for a, b in zip(outs[1], outs[2]):
        assert np.array_equal(a, b)
    for d, s in ((outs[1][0], outs[1][1]), (outs[1][2], outs[1][3])):
        assert d.size and not any((int(x), int(y)) in zero for x, y in zip(d, s))
