"""Seeded mutants of dataset shards and checkpoints (the mutation run, docs/testing.md).

plan(originals, count, seed) draws `count` mutants; mutant i depends only on (seed, i) and the original
files, so `--seed S --only I` rebuilds exactly one. Two families:
- byte: bits flipped, a range zeroed or overwritten, the file truncated, or garbage appended, aimed at
  one kind of region of the file's byte map (tests/mutation/h5map.py: superblock, object headers,
  B-trees, heaps, data chunks, ...);
- struct: an h5py edit that keeps the file valid HDF5 but breaks (or, for a few, only re-encodes) the
  hpctrain schema: huge or negative shapes, wrong dtypes, missing or extra datasets and attributes,
  datasets with no stored chunks, counters out of range, non-finite statistics, external storage,
  links, fixed- vs variable-length strings, other layouts and filters.
apply(m, dst) writes the mutant of m.target to dst (a copy of the original, then edited)."""
import os
import shutil
import sys

import h5py
import numpy as np

# The mutants_*.py modules beside this file (run_mutation.py puts this directory on sys.path too).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mutants_bytes import Mutant, apply_byte, plan_byte  # noqa: F401
from mutants_h5 import _SIDE_DIR
from mutants_shard import SHARD_STRUCT
from mutants_ckpt import CKPT_STRUCT


# ---------------------------------------------------------------------------------------------------
def plan(originals, count, seed, struct_share=0.5):
    """originals: list of dicts {name, type: "shards"|"checkpoint", files: [paths], weight}.
    Returns `count` Mutants; mutant i depends only on (seed, i) and the files."""
    w = np.array([o["weight"] for o in originals], float)
    out = []
    for i in range(count):
        r = np.random.default_rng([seed, i])
        o = originals[int(r.choice(len(originals), p=w / w.sum()))]
        target = o["files"][int(r.integers(len(o["files"])))]
        if r.random() < struct_share:
            fns = SHARD_STRUCT if o["type"] == "shards" else CKPT_STRUCT
            fn = fns[int(r.integers(len(fns)))]
            out.append(Mutant(i, o["name"], target, "struct", "struct:" + fn.__name__[2:],
                              dict(fn=fn.__name__, seed=[seed, i, 1]), None))
        else:
            kind, params, prot = plan_byte(r, target)
            out.append(Mutant(i, o["name"], target, "byte", kind, params, prot))
    return out



def apply(m, dst, side_dir):
    """Writes the mutant to dst (side files, if any, into side_dir); returns a one-line description."""
    _SIDE_DIR[0] = os.path.abspath(side_dir)
    if m.family == "byte":
        apply_byte(m, dst)
        return m.kind + " " + m.params.get("region", "")
    shutil.copyfile(m.target, dst)
    fn = {f.__name__: f for f in SHARD_STRUCT + CKPT_STRUCT}[m.params["fn"]]
    with h5py.File(dst, "r+") as f:
        return fn(f, np.random.default_rng(m.params["seed"]), dst)
