"""tests/mutation/mutants.py: the Mutant record and the byte-level mutations (aimed by h5map at one
kind of HDF5 structure)."""
import os
import shutil

import numpy as np

import h5map


BYTE_OPS = ("flip", "zero", "random", "truncate", "append")
BYTE_WEIGHTS = (0.4, 0.2, 0.15, 0.2, 0.05)


class Mutant:
    def __init__(self, index, original, target, family, kind, params, protected):
        self.index, self.original, self.target = index, original, target
        self.family, self.kind, self.params, self.protected = family, kind, params, protected

    def to_json(self):
        return dict(index=self.index, original=self.original, target=os.path.basename(self.target),
                    family=self.family, kind=self.kind, params=self.params, protected=self.protected)


# ---------------------------------------------------------------------------------------------------
# byte mutations
def plan_byte(rng, path):
    m = h5map.by_kind(path)
    size = os.path.getsize(path)
    kinds = sorted(m)
    # Data chunks get a quarter of the byte mutations; the metadata kinds share the rest equally.
    w = np.array([0.25 / 0.75 * (len(kinds) - 1) if k == "data" else 1.0 for k in kinds])
    kind = kinds[int(rng.choice(len(kinds), p=w / w.sum()))] if "data" in kinds and len(kinds) > 1 else kinds[rng.integers(len(kinds))]
    reg = m[kind][rng.integers(len(m[kind]))]
    op = BYTE_OPS[rng.choice(len(BYTE_OPS), p=BYTE_WEIGHTS)]
    span = reg.end - reg.start
    if op == "truncate":
        at = int(reg.start + rng.integers(span))
        # The superblock records the end-of-file address, so a shortened file is always detectable.
        return f"truncate:{kind}", dict(length=at, region=repr(reg)), True
    if op == "append":
        n = int(rng.integers(1, 4097))
        return "append:eof", dict(count=n, seed=int(rng.integers(2**31))), True
    if op == "flip":
        # Stored as XOR masks, not new values: the originals differ between runs in a few bytes
        # (HDF5's modification times in prepare's object headers), and a flip must stay a flip.
        masks = {}
        for _ in range(int(rng.integers(1, 4))):
            pos = int(reg.start + rng.integers(span))
            masks[pos] = masks.get(pos, 0) ^ (int(1 << rng.integers(8)) if rng.random() < 0.6 else int(rng.integers(1, 256)))
        masks = {p: v for p, v in masks.items() if v} or {pos: 0xFF}
        prot = all(h5map.protected_at(path, p, p + 1) for p in masks)
        return f"flip:{kind}", dict(xor=[[int(p), "%02x" % v] for p, v in sorted(masks.items())], region=repr(reg)), prot
    with open(path, "rb") as fh:
        data = fh.read()
    edits = []
    n = int(min(span, rng.integers(1, 65)))
    start = int(reg.start + rng.integers(span - n + 1))
    for k in range(n):
        v = 0 if op == "zero" else int(rng.integers(256))
        edits.append([start + k, v])
    edits = [[p, v] for p, v in edits if data[p] != v] or [[edits[0][0], data[edits[0][0]] ^ 0xFF]]
    edits = sorted({p: v for p, v in edits}.items())
    lo, hi = edits[0][0], edits[-1][0] + 1
    prot = all(h5map.protected_at(path, p, p + 1) for p, _ in edits) if lo != hi else False
    # Stored compactly: runs of consecutive positions as [offset, "new bytes in hex"].
    runs = []
    for p, v in edits:
        if runs and runs[-1][0] + len(runs[-1][1]) // 2 == p:
            runs[-1][1] += "%02x" % v
        else:
            runs.append([int(p), "%02x" % v])
    return f"{op}:{kind}", dict(edits=runs, region=repr(reg)), prot


def apply_byte(m, dst):
    shutil.copyfile(m.target, dst)
    p = m.params
    if m.kind.startswith("truncate"):
        os.truncate(dst, p["length"])
    elif m.kind.startswith("append"):
        with open(dst, "ab") as fh:
            fh.write(np.random.default_rng(p["seed"]).integers(0, 256, p["count"], dtype=np.uint8).tobytes())
    elif "xor" in p:
        with open(dst, "r+b") as fh:
            for pos, hexmask in p["xor"]:
                fh.seek(pos)
                b = fh.read(1)
                fh.seek(pos)
                fh.write(bytes([b[0] ^ int(hexmask, 16)]))
    else:
        with open(dst, "r+b") as fh:
            for pos, hexbytes in p["edits"]:
                fh.seek(pos)
                fh.write(bytes.fromhex(hexbytes))
    return ""
