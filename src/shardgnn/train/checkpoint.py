"""Training checkpoints in HDF5: per-partition model, optimiser and RNG states, plus the history.

Rank-local: the engine gathers every partition's state to rank 0, which calls
:func:`write_checkpoint`; every rank reads the file with :func:`read_checkpoint` on resume.

Layout::

    /                    attrs: format, epoch, config (JSON), parts
    /part-NNNNN/model/<state-dict key>            arrays
    /part-NNNNN/optim/<param index>/<state key>   arrays; attr param_groups (JSON) on optim
    /part-NNNNN/rng/torch                         uint8 torch CPU generator state
    /part-NNNNN/rng   attr numpy                  numpy bit-generator state (JSON)
    /history/<series>                             per-epoch metrics so far; attrs best_*
    /history/best_model/<state-dict key>          the best-validation model so far
    /extra/<name>/<key>                           optional engine tables in global order (the
                                                  sampled engine's vertex embeddings and their
                                                  sparse optimiser state: /extra/embedding)

Every dataset carries attribute ``crc32`` (CRC-32 of its bytes, :func:`shardgnn.io.outputs.
checksum`) and the root ``checksums = 1``; readers verify each dataset and refuse a mismatch
with one line naming the file and the dataset. A checkpoint written before checksums (no root
``checksums``) is read unverified, with one warning.

Engines whose state is not per partition (rdm, cagnet1d) use :func:`write_state` /
:func:`read_state`: the same root attributes plus ``engine``, and their state as nested groups of
arrays under ``/state``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from shardgnn.device import numpy_of
from shardgnn.errors import input_error
from shardgnn.io import outputs
from shardgnn.io.results import hdf5_output, open_hdf5

if TYPE_CHECKING:  # torch is imported where it is used: reading a checkpoint needs none
    import torch

FORMAT = "shardgnn-checkpoint"
#: Dataset attribute holding the CRC-32 of its bytes, and the root attribute saying the file
#: has them (1) — absent in checkpoints written before checksums.
CRC_ATTR = "crc32"
CHECKSUMS_ATTR = "checksums"


def _tensor_dict(sd: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {k: numpy_of(v).copy() for k, v in sd.items()}


def partition_state(model: torch.nn.Module, opt: torch.optim.Optimizer, torch_rng: torch.Tensor,
                    np_rng: np.random.Generator) -> dict[str, Any]:
    """A picklable snapshot of one partition's training state (numpy arrays and JSON)."""
    import torch

    osd = opt.state_dict()
    optim = {str(i): {k: (numpy_of(v).copy() if torch.is_tensor(v) else np.asarray(v))
                      for k, v in st.items()} for i, st in osd["state"].items()}
    return {"model": _tensor_dict(model.state_dict()), "optim": optim,
            "param_groups": json.dumps(osd["param_groups"]),
            "torch_rng": numpy_of(torch_rng).copy(),
            "numpy_rng": json.dumps(np_rng.bit_generator.state)}


def restore_partition(state: dict[str, Any], model: torch.nn.Module,
                      opt: torch.optim.Optimizer) -> tuple[torch.Tensor, np.random.Generator]:
    """Load a snapshot into ``model``/``opt``; returns (torch RNG state, numpy generator)."""
    import torch

    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state["model"].items()})
    osd = {"state": {int(i): {k: torch.from_numpy(np.array(v)) for k, v in st.items()}
                     for i, st in state["optim"].items()},
           "param_groups": json.loads(state["param_groups"])}
    opt.load_state_dict(osd)
    rng = np.random.default_rng()
    rng.bit_generator.state = json.loads(state["numpy_rng"])
    return torch.from_numpy(np.array(state["torch_rng"], dtype=np.uint8)), rng


def _dataset(g: Any, name: str, value: Any) -> None:
    """Dataset ``name`` of ``g`` holding ``value``, with the CRC-32 of its bytes as attribute
    ``crc32`` (verified by :func:`_value`)."""
    arr = np.asarray(value)
    ds = g.create_dataset(name, data=arr)
    ds.attrs[CRC_ATTR] = outputs.checksum(arr)


def _value(ds: Any, path: Path, verify: bool) -> Any:
    """The value of dataset ``ds``, its checksum verified (``verify``); ShardError naming the
    file and the dataset on a mismatch."""
    v = ds[()]
    if verify:
        want = ds.attrs.get(CRC_ATTR)
        got = outputs.checksum(np.asarray(v))
        if want is None or int(want) != got:
            raise input_error(path, f"dataset {ds.name}: expected CRC-32 "
                              f"{'(none stored)' if want is None else int(want)}, got {got}: "
                              "the checkpoint is corrupt (restore it from a copy or train again)")
    return v


def _write_dict(g: Any, d: dict[str, Any]) -> None:
    for k, v in d.items():
        if isinstance(v, dict):
            _write_dict(g.require_group(k), v)
        else:
            _dataset(g, k, v)


def _read_dict(g: Any, path: Path, verify: bool) -> dict[str, Any]:
    import h5py

    return {k: (_read_dict(v, path, verify) if isinstance(v, h5py.Group)
                else _value(v, path, verify)) for k, v in g.items()}


def _verified(f: Any, p: Path) -> bool:
    """Whether ``f`` carries checksums (written since they were added); an older checkpoint is
    read unverified with one warning."""
    if int(f.attrs.get(CHECKSUMS_ATTR, 0)) >= 1:
        return True
    from shardgnn import log

    log.get().warning("%s: checkpoint written before checksums were added: its arrays cannot "
                      "be verified (write a new one to have them checked)", p)
    return False


def write_checkpoint(path: str | os.PathLike, epoch: int, config: dict[str, Any],
                     parts: dict[int, dict[str, Any]], history: dict[str, Any],
                     extra: dict[str, dict[str, np.ndarray]] | None = None) -> None:
    """Write a checkpoint atomically (temp name, then rename); ``extra`` tables go to
    ``/extra/<name>/<key>``. Rank-local (rank 0 calls it)."""
    p = Path(path)
    with outputs.atomic_file(p) as tmp, hdf5_output(tmp) as f:
        f.attrs["format"] = FORMAT
        f.attrs[CHECKSUMS_ATTR] = 1
        f.attrs["epoch"] = int(epoch)
        f.attrs["parts"] = len(parts)
        f.attrs["config"] = json.dumps(config, sort_keys=True, default=str)
        for i, st in sorted(parts.items()):
            g = f.create_group(f"part-{i:05d}")
            _write_dict(g.create_group("model"), st["model"])
            og = g.create_group("optim")
            _write_dict(og, st["optim"])
            og.attrs["param_groups"] = st["param_groups"]
            rg = g.create_group("rng")
            _dataset(rg, "torch", st["torch_rng"])
            rg.attrs["numpy"] = st["numpy_rng"]
        h = f.create_group("history")
        for k, v in history.items():
            if k == "best_model":
                _write_dict(h.create_group("best_model"), v or {})
            elif isinstance(v, (list, np.ndarray)):
                _dataset(h, k, np.asarray(v, dtype=np.float64))
            else:
                h.attrs[k] = v
        for name, table in (extra or {}).items():
            _write_dict(f.require_group("extra").create_group(name), table)


def config_mismatch(path: str | os.PathLike | None, saved: dict[str, Any],
                    mine: dict[str, Any], keys: tuple[str, ...]) -> str:
    """'' when the checkpoint's config ``saved`` and this run's ``mine`` agree on ``keys``
    (compared as JSON), else the message naming the first that differs. Rank-local."""
    mine = json.loads(json.dumps(mine, default=str))
    bad = [k for k in keys if saved.get(k) != mine.get(k)]
    if not bad:
        return ""
    k = bad[0]
    return (f"{path}: checkpoint has {k}={saved.get(k)!r}, this run {mine.get(k)!r}; expected "
            f"the same {', '.join(bad)}")


def _open(p: Path) -> Any:
    """The checkpoint file ``p`` opened read-only, its format checked (ShardError otherwise)."""
    f = open_hdf5(p, "checkpoint file", "an HDF5 checkpoint")
    if f.attrs.get("format") != FORMAT:
        got = f.attrs.get("format")
        f.close()
        raise input_error(p, f"expected format {FORMAT!r}, got {got!r}")
    return f


def read_checkpoint(path: str | os.PathLike, parts: list[int]) -> dict[str, Any]:
    """Read the epoch, config, history and the states of partitions ``parts``. Rank-local."""
    p = Path(path)
    with _open(p) as f:
        ok = _verified(f, p)
        out: dict[str, Any] = {"epoch": int(f.attrs["epoch"]),
                               "config": json.loads(f.attrs["config"]),
                               "num_parts": int(f.attrs["parts"]), "parts": {}}
        for i in parts:
            name = f"part-{i:05d}"
            if name not in f:
                raise input_error(p, f"expected a state for partition {i}, got none")
            g = f[name]
            out["parts"][i] = {"model": _read_dict(g["model"], p, ok),
                               "optim": _read_dict(g["optim"], p, ok),
                               "param_groups": g["optim"].attrs["param_groups"],
                               "torch_rng": _value(g["rng"]["torch"], p, ok),
                               "numpy_rng": g["rng"].attrs["numpy"]}
        h = f["history"]
        hist: dict[str, Any] = {k: np.asarray(_value(v, p, ok)).tolist() for k, v in h.items()
                                if k != "best_model"}
        hist.update({k: (v.item() if isinstance(v, np.generic) else v) for k, v in h.attrs.items()})
        hist["best_model"] = _read_dict(h["best_model"], p, ok) if "best_model" in h else {}
        out["history"] = hist
    return out


def read_extra(path: str | os.PathLike, name: str) -> dict[str, np.ndarray]:
    """The arrays of table ``/extra/<name>`` (verified); ShardError when the checkpoint has
    none. Rank-local."""
    p = Path(path)
    with _open(p) as f:
        if f"extra/{name}" not in f:
            raise input_error(p, f"expected table /extra/{name} in the checkpoint, got none")
        return _read_dict(f["extra"][name], p, _verified(f, p))


class ExtraRows:
    """Row slices of dataset ``/extra/<name>/<key>`` of a checkpoint, read on demand (the
    inference engine's layer-0 input for trained vertex embeddings). Rank-local."""

    def __init__(self, path: str | os.PathLike, name: str, key: str = "rows") -> None:
        self.path = Path(path)
        f = _open(self.path)
        where = f"extra/{name}/{key}"
        if where not in f:
            f.close()
            raise input_error(self.path, f"expected table /{where} in the checkpoint, got none")
        self._f, self._ds = f, f[where]
        self.shape = tuple(int(v) for v in self._ds.shape)

    def __getitem__(self, rows: slice) -> np.ndarray:
        return np.asarray(self._ds[rows], np.float32)

    def close(self) -> None:
        self._f.close()


def write_state(path: str | os.PathLike, engine: str, epoch: int, config: dict[str, Any],
                state: dict[str, Any]) -> None:
    """Write an engine's whole training state (nested dicts of arrays under ``/state``) as a
    checkpoint, atomically (temp name, then rename). Rank-local (rank 0 calls it).

    Root attributes as in :func:`write_checkpoint` plus ``engine``; the averaging engine's
    per-partition layout is :func:`write_checkpoint`.
    """
    with outputs.atomic_file(path) as tmp, hdf5_output(tmp) as f:
        f.attrs["format"] = FORMAT
        f.attrs[CHECKSUMS_ATTR] = 1
        f.attrs["engine"] = engine
        f.attrs["epoch"] = int(epoch)
        f.attrs["config"] = json.dumps(config, sort_keys=True, default=str)
        _write_dict(f.create_group("state"), state)


def read_state(path: str | os.PathLike, engine: str) -> dict[str, Any]:
    """Read a checkpoint written by :func:`write_state` for ``engine``: ``epoch``, ``config``
    and ``state`` (nested dicts of arrays). Rank-local."""
    p = Path(path)
    with _open(p) as f:
        got = f.attrs.get("engine", "averaging")
        if got != engine or "state" not in f:
            raise input_error(p, f"expected a checkpoint of --engine {engine}, got one of {got}")
        return {"epoch": int(f.attrs["epoch"]), "config": json.loads(f.attrs["config"]),
                "state": _read_dict(f["state"], p, _verified(f, p))}
