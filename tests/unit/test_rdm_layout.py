"""Pure RDM layout maths, order parsing, config validation and the schedule's costs."""
import numpy as np
import pytest

from shardgnn.errors import ShardError
from shardgnn.rdm.layout import Grid, bcast_bytes, panels_from_parts, resplit_bytes, resplit_counts
from shardgnn.rdm.main import RDMConfig, default_order, validate
from shardgnn.rdm.schedule import all_orders, cost_units, dry_run, epoch_bytes, parse_order


@pytest.mark.parametrize("n,p,r", [(10, 4, 4), (3, 4, 4), (0, 2, 2), (17, 6, 3), (17, 6, 2),
                                   (17, 6, 1), (5, 8, 2)])
def test_grid_tiles_partition_the_matrix(n, p, r):
    g = Grid(n, p, r)
    for f in (1, 3, 7):
        cover = np.zeros((n, f), dtype=int)
        rows = np.zeros((n, f), dtype=int)
        for k in range(p):
            a, b = g.panel_range(k)
            c0, c1 = g.col_range(f, k)
            cover[a:b, c0:c1] += 1
            r0, r1 = g.row_range(k)
            rows[r0:r1, :] += 1
            assert g.tile_shape("col", f, k) == (b - a, c1 - c0)
        assert (cover == 1).all() and (rows == 1).all()
        # alltoallv counts are consistent between senders and receivers inside a row group
        for k in range(p):
            for src in ("row", "col"):
                send, _ = resplit_counts(g, f, k, src)
                for q, m in enumerate(g.group_members(k)):
                    _, recv = resplit_counts(g, f, m, src)
                    assert recv[k % r] == send[q]
        tot = int(resplit_bytes(g, f, 1, "row").sum())
        assert tot == int(resplit_bytes(g, f, 1, "col").sum())
        if r == p and n % p == 0 and f % p == 0:
            assert tot == n * f * (p - 1) // p


def test_bad_grids_and_orders():
    with pytest.raises(ShardError, match="--replicas"):
        Grid(10, 4, 3)
    with pytest.raises(ShardError, match="--order"):
        parse_order("SSD", 2)
    with pytest.raises(ShardError, match="--order"):
        parse_order("SSDX", 2)
    assert str(parse_order("ds:sd", 2)) == "DSSD"
    o = parse_order("DSSD", 2)
    assert o.fwd == ("D", "S") and o.bwd == ("D", "S")  # bwd indexed by layer: layer1 D, layer2 S
    assert str(default_order(2)) == "DSDS" and str(default_order(3)) == "DSDSDS"
    with pytest.raises(ShardError, match="--replicas"):
        validate(RDMConfig(data="x", replicas=3), 4)
    with pytest.raises(ShardError, match="--saint"):
        validate(RDMConfig(data="x", saint="node", replicas=2), 4)
    with pytest.raises(ShardError, match="--dropout"):
        validate(RDMConfig(data="x", dropout=1.0), 2)


def test_schedule_follows_table_iv_rules_where_the_engine_does():
    fi, fh, fo = 1000, 100, 10
    # orders whose layer-1 backward is S (no G^0 difference) and no mask exchange: Table IV values
    table = {"SSSS": (fi + 4 * fh + 2 * fo, fi + 2 * fh + fo), "DSSS": (4 * fh + 2 * fo, 3 * fh + fo),
             "DSDS": (4 * fh, 4 * fh), "SSDS": (fi + 4 * fh, fi + 3 * fh),
             "DDDS": (4 * fh + 2 * fo + 2 * min(fh, fo), 3 * fh + fo + min(fh, fo))}
    for s, (comm, sparse) in table.items():
        c = cost_units([fi, fh, fo], parse_order(s, 2))
        assert (c["comm_units"], c["sparse_units"]) == (comm, sparse), s
    for L in (1, 2, 3, 4):
        for o in all_orders(L):
            dry_run([9, 5, 7, 3, 4][:L + 1], o, memo=True)
            dry_run([9, 5, 7, 3, 4][:L + 1], o, memo=False)


def test_epoch_bytes_shapes_and_p1_zero():
    o = parse_order("DSDS", 2)
    b1 = epoch_bytes([20, 8, 3], o, 50, 1, 1, 4)
    assert all(int(v.sum()) == 0 for v in b1.values())
    b = epoch_bytes([20, 8, 3], o, 50, 4, 2, 4)
    assert b["bcast"].shape == (4,) and int(b["bcast"].sum()) > 0
    assert int(b["allreduce_grad"][0]) == (20 * 8 + 8 + 8 * 3 + 3) * 4
    g = Grid(50, 4, 2)
    assert int(bcast_bytes(g, 8, 4).sum()) == 2 * 50 * 8 * 4


def test_panels_follow_partitions():
    assert panels_from_parts(np.array([5, 5, 5, 5]), 2) == (0, 10, 20)
    assert panels_from_parts(np.array([3, 9, 1, 7]), 2) == (0, 12, 20)
    with pytest.raises(ShardError, match="partition"):
        panels_from_parts(np.array([4]), 2)
