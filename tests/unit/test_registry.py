"""The one import-path loader, the model registries and the models' declared capabilities."""
import numpy as np
import pytest
import torch

from shardgnn.errors import ShardError
from shardgnn.registry import MODELS, NAU_MODELS, load_target
from shardgnn.train import models


def test_load_target_names_the_object_or_says_what_went_wrong(tmp_path, monkeypatch):
    (tmp_path / "lt_mod.py").write_text("class Outer:\n    class Inner:\n        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import lt_mod

    assert load_target("lt_mod") is lt_mod
    assert load_target("lt_mod:Outer.Inner") is lt_mod.Outer.Inner
    cases = [("lt_mod:", "--algo 'lt_mod:': expected an import path package.module:Name"),
             (":Outer", "--algo ':Outer': expected an import path package.module:Name"),
             ("lt_mod:Nope", "--algo 'lt_mod:Nope': expected a name 'Nope' in module 'lt_mod', "
                             "found none"),
             ("lt_mod:Outer.Nope", "expected a name 'Outer.Nope' in module 'lt_mod'"),
             ("no_such_mod_xyz:A", "--algo 'no_such_mod_xyz:A': cannot import module "
                                   "'no_such_mod_xyz' (ModuleNotFoundError: No module named")]
    for spec, msg in cases:
        with pytest.raises(ShardError) as exc:
            load_target(spec, "--algo")
        assert msg in str(exc.value) and "\n" not in str(exc.value)


def test_registries_resolve_names_and_import_paths():
    assert MODELS.resolve("GCN") is models.GCN
    assert MODELS.resolve("shardgnn.train.models:SGC") is models.SGC
    assert NAU_MODELS.resolve("gcn").__module__ == "shardgnn.nau.models.gcn"
    assert NAU_MODELS.resolve("gcn") is not MODELS.resolve("gcn")
    with pytest.raises(ShardError, match=r"unknown --model 'pinsage'; expected one of gcn, sage"):
        MODELS.resolve("pinsage")
    with pytest.raises(ShardError, match=r"unknown --model 'sage'; expected one of gcn, pinsage"):
        NAU_MODELS.resolve("sage")


def test_nau_engine_refuses_a_model_it_cannot_run(tmp_path, capsys):
    from shardgnn.cli.main import main

    rc = main(["train", "--engine", "nau", "--model", "sage", str(tmp_path), "--out",
               str(tmp_path / "x.h5")])
    err = capsys.readouterr().err
    assert rc == 2 and "--model: expected gcn | pinsage | magnn | jknet | pgnn | " in err
    assert "got sage" in err and not (tmp_path / "x.h5").exists()


#: what each built-in model declares (what the engines probed from signatures before)
DECLARED = {"gcn": {"stages", "blocks", "degrees", "edge_weight"},
            "sage": {"stages", "blocks", "trim"},
            "gat": {"stages", "blocks"},
            "sgc": {"stages"},
            "ngnn-gcn": {"stages", "blocks", "degrees", "edge_weight"},
            "ngnn-sage": {"stages", "blocks", "trim"}}


def test_models_declare_their_capabilities():
    assert set(MODELS) == set(DECLARED)
    for name, caps in DECLARED.items():
        got = {c for c in models.CAPABILITIES if models.supports(MODELS[name], c)}
        assert got == caps, name
    assert models.registered_with("blocks") == ("gcn", "sage", "gat", "ngnn-gcn", "ngnn-sage")
    user = torch.nn.Linear(2, 2)  # a user module declares nothing unless it sets the constants
    assert not any(models.supports(user, c) for c in models.CAPABILITIES)
    with pytest.raises(ValueError, match="unknown model capability 'edge_weights'"):
        models.supports(user, "edge_weights")


@pytest.mark.parametrize("name", ["gcn", "sage", "gat", "ngnn-gcn", "ngnn-sage"])
def test_block_models_run_on_blocks(name):
    """What supports_blocks promises: layer / forward_blocks over per-hop blocks."""
    m = models.build(name, 4, 8, 3, 2, 0.5).eval()
    b1 = models.TorchBlock(np.array([0, 2, 3, 5, 6, 7]), np.array([1, 2, 0, 3, 4, 1, 2]), 8, 5)
    b2 = models.TorchBlock(np.array([0, 2, 3, 4]), np.array([1, 2, 0, 4]), 5, 3)
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    out = m.forward_blocks(x, [b1, b2])
    assert out.shape == (3, 3)
    torch.testing.assert_close(out, m.layer(1, m.layer(0, x, b1), b2))
