"""Rank script: stream every dataset under BASE with EdgeStream and compute info; write what each rank saw.

Usage: ingest_stream.py BASE OUT. For each dataset folder BASE/<ds>, rank r writes
OUT/<ds>-<mode>-rank<r>.npy (edges it streamed, in order; mode one/both) and
OUT/<ds>-types-rank<r>.npy when the dataset has edge types, plus OUT/<ds>-info-rank<r>.json.
"""
import json
import sys
from pathlib import Path

import numpy as np

from shardgnn.cli.info import gather_info
from shardgnn.comm import world
from shardgnn.io.canonical import EdgeStream

base, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
comm = world()
r = comm.rank
for ds in sorted(p for p in base.iterdir() if p.is_dir()):
    for mode, both in (("one", False), ("both", True)):
        st = EdgeStream(ds, comm, chunk=3, both_directions=both)
        parts = [e for e in st]
        got = np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.int64)
        assert got.shape[0] == st.num_local, (got.shape, st.num_local)
        np.save(out / f"{ds.name}-{mode}-rank{r}.npy", got)
    st = EdgeStream(ds, comm, chunk=2, with_types=True)
    if st.with_types:
        types = [t for _, t in st.chunks()]
        np.save(out / f"{ds.name}-types-rank{r}.npy",
                np.concatenate(types) if types else np.zeros(0, dtype=np.int32))
    info = gather_info(str(ds), comm, chunk=4)
    (out / f"{ds.name}-info-rank{r}.json").write_text(json.dumps(info))
comm.barrier()
