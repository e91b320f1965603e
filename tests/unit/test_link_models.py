"""Link-prediction models, rank-local: the HGT layer on a typed block equals PyG's
``HGTConv.forward`` (values and gradients), and ``--layers 0`` is a decoder on the input rows."""
import numpy as np
import torch

from shardgnn.train.decoders import DistMultDecoder, InputRows, build_link_model
from shardgnn.train.typed import HGT


class _Block:
    def __init__(self, st, src, dst, et, num_src, num_dst):
        self.src_type, self.etype = st, et
        self.edge_index = torch.stack([src, dst])
        self.num_src, self.num_dst = num_src, num_dst


def _pyg_reference(m, i, x, b):
    """PyG's HGTConv over every row of the block (what HGT.conv ran before), destinations
    kept."""
    st = b.src_type
    rows = [torch.nonzero(st == k).view(-1) for k in range(len(m.ntypes))]
    if i == 0:
        h = x.new_empty(x.shape[0], m.hidden)
        for k, r in enumerate(rows):
            h[r] = m.inp[k](x[r])
        x = h
    local = torch.empty(st.shape[0], dtype=torch.long)
    for r in rows:
        local[r] = torch.arange(r.numel())
    src, dst = b.edge_index
    code = (st[src] * 1_000_003 + b.etype) * 1_000_003 + st[dst]
    tcode = (m.trip[:, 0] * 1_000_003 + m.trip[:, 1]) * 1_000_003 + m.trip[:, 2]
    eidx = {e: torch.stack([local[src[code == tcode[j]]], local[dst[code == tcode[j]]]])
            for j, e in enumerate(m.etypes)}
    out = m.convs[i]({m.ntypes[k]: x[r] for k, r in enumerate(rows)}, eidx)
    res = x.new_zeros(b.num_src, m.widths[i])
    for k, r in enumerate(rows):
        if out.get(m.ntypes[k]) is not None:
            res[r] = out[m.ntypes[k]]
    return res[:b.num_dst]


def test_hgt_layer_equals_pyg_hgtconv():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    nsrc, ndst, NT, T, E = 300, 80, 3, 5, 900
    trip = [(a, r, b) for a in range(NT) for r in range(T) for b in range(NT) if (a + r + b) % 3]
    m = HGT(6, 8, 8, num_layers=2, heads=2, num_node_types=NT, num_edge_types=T, triples=trip)
    st = torch.from_numpy(rng.integers(0, NT, nsrc))
    b = _Block(st, torch.from_numpy(rng.integers(0, nsrc, E)),
               torch.from_numpy(rng.integers(0, ndst, E)), torch.from_numpy(rng.integers(0, T, E)),
               nsrc, ndst)
    for i, width in ((0, 6), (1, 8)):
        x = torch.randn(nsrc, width, requires_grad=True)
        ours = m.conv(i, x, b)
        (g_ours,) = torch.autograd.grad(ours.square().sum(), x)
        ref = _pyg_reference(m, i, x, b)
        (g_ref,) = torch.autograd.grad(ref.square().sum(), x)
        assert ref.abs().max() > 0.1
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(g_ours, g_ref, rtol=1e-5, atol=1e-6)
    # a triple the model does not know carries no message (as in PyG: no edge type for it)
    unknown = _Block(st, torch.tensor([5]), torch.tensor([1]), torch.tensor([0]), nsrc, ndst)
    st2 = st.clone()
    st2[5], st2[1] = 0, 0        # (0, 0, 0): (0 + 0 + 0) % 3 == 0, not a triple
    unknown.src_type = st2
    x = torch.randn(nsrc, 8)
    torch.testing.assert_close(m.conv(1, x, unknown), _pyg_reference(m, 1, x, unknown))


def test_layers_0_is_the_decoder_on_the_input_rows():
    m = build_link_model("gcn", 12, 64, 0, 0.5, 1, "distmult", {"num_edge_types": 3})
    assert isinstance(m.encoder, InputRows) and isinstance(m.decoder, DistMultDecoder)
    assert m.decoder.rel.shape == (3, 12) and not list(m.encoder.parameters())
    x = torch.randn(5, 12)
    assert m.encoder.forward_blocks(x, []) is x
