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

import h5py
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


# ---------------------------------------------------------------------------------------------------
# struct mutations: fn(f, r, dst) -> detail text; f is the copy opened "r+"
def pick(r, seq):
    return seq[int(r.integers(len(seq)))]


def recreate(f, name, data=None, shape=None, dtype=None, like=None, **kw):
    """Replaces dataset `name` (keeping chunking and filters of `like` unless kw says otherwise)."""
    like = like if like is not None else (f[name] if name in f else None)
    opts = {}
    if like is not None and isinstance(like, h5py.Dataset) and like.chunks and "chunks" not in kw:
        opts["fletcher32"] = like.fletcher32
        if like.compression:
            opts["compression"] = like.compression
    opts.update(kw)
    if name in f:
        del f[name]
    if data is not None:
        if "chunks" not in opts and opts:
            opts["chunks"] = True
        return f.create_dataset(name, data=data, **opts)
    if "chunks" not in opts:
        opts["chunks"] = tuple(min(int(s), 64) if i else 1 for i, s in enumerate(shape)) if len(shape) > 1 else (min(int(shape[0]) or 1, 1024),)
    return f.create_dataset(name, shape=shape, dtype=dtype, **opts)


def int_attr(v):
    return np.int64(v) if not -2**31 <= v < 2**31 else np.int32(v)


def side_path(dst, what):
    """A side file of the mutant dst (external raw data, a linked file), kept out of dst's directory
    (a dataset directory holds shards only) in the directory apply() was given."""
    d = _SIDE_DIR[0]
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, os.path.basename(dst) + "." + what.replace("/", "_"))


def write_external(f, name, dst, variant, r):
    """`name` rewritten as contiguous data in an external raw file (absolute path): the same bytes,
    or a cut-short, missing or shifted file."""
    arr = f[name][...]
    raw = side_path(dst, name + ".raw")
    with open(raw, "wb") as fh:
        fh.write(arr.tobytes())
    del f[name]
    off = 0
    if variant == "shifted":
        with open(raw, "wb") as fh:
            fh.write(b"\0" * 16 + arr.tobytes())
        off = 8  # points 8 bytes before the real data: different content
    f.create_dataset(name, shape=arr.shape, dtype=arr.dtype, external=[(raw, off, arr.nbytes)])
    if variant == "truncated":
        os.truncate(raw, int(r.integers(0, max(arr.nbytes, 1))))
    elif variant == "missing":
        os.remove(raw)
    return f"{name} in external file {os.path.basename(raw)} ({variant})"


# ---- shards
SHARD_REQUIRED = ("format", "version", "split", "shard_index", "num_shards", "num_classes", "height", "width",
                  "channels", "class_names", "mean", "std")
SHARD_INTS = ("version", "shard_index", "num_shards", "num_classes", "height", "width", "channels")


def s_images_huge(f, r, dst):
    n, h, w, c = f["images"].shape
    shape = pick(r, [(4, 2**32, 2**32, 1), (2**40, h, w, c), (2**31, h, w, c), (n, 2**31, 1, 1), (n, h, w, 2**20),
                     (2**62, 1, 1, 1)])
    recreate(f, "images", shape=shape, dtype=np.uint8, chunks=(1,) + tuple(min(s, 64) for s in shape[1:]))
    if shape[0] != n:
        recreate(f, "labels", shape=(shape[0],), dtype=np.int32, chunks=(min(1024, shape[0]),))
    if r.random() < 0.5:
        for k, v in zip(("height", "width", "channels"), shape[1:]):
            f.attrs[k] = int_attr(v)
        return f"/images shape {shape}, attributes to match"
    return f"/images shape {shape}"


def s_images_unwritten(f, r, dst):
    img = f["images"]
    shape = img.shape
    if r.random() < 0.5:
        recreate(f, "images", shape=shape, dtype=np.uint8, chunks=(1,) + shape[1:])
        return "/images never written (no stored chunks)"
    data = img[...]
    recreate(f, "images", shape=shape, dtype=np.uint8, chunks=(1,) + shape[1:])
    k = int(r.integers(1, shape[0]))
    f["images"][:k] = data[:k]
    return f"/images: only the first {k} of {shape[0]} rows stored"


def s_images_empty(f, r, dst):
    n, h, w, c = f["images"].shape
    del f["images"]
    f.create_dataset("images", shape=(0, h, w, c), dtype=np.uint8, maxshape=(None, h, w, c), chunks=(1, h, w, c))
    # /labels keeps its n rows: a shard with no samples at all is not invalid by docs/dataset.md
    # (an empty test split evaluates 0 samples), so it would not be a fair mutant.
    return f"/images with 0 rows, /labels with {n}"


def s_images_rank(f, r, dst):
    a = f["images"][...]
    b = pick(r, [a.reshape(a.shape[:3]) if a.shape[3] == 1 else a[..., 0], a[..., None], a.reshape(-1), a[0]])
    recreate(f, "images", data=b)
    return f"/images reshaped to {b.shape}"


def s_images_dtype(f, r, dst):
    t = pick(r, [np.uint16, np.int8, np.float32, np.int32, np.float64, np.int64])
    recreate(f, "images", data=f["images"][...].astype(t))
    return f"/images as {np.dtype(t).name}"


def s_labels_dtype(f, r, dst):
    t = pick(r, [np.int64, np.int16, np.uint8, np.float32, np.float64, np.uint32])
    recreate(f, "labels", data=f["labels"][...].astype(t))
    return f"/labels as {np.dtype(t).name}"


def s_labels_value(f, r, dst):
    lab = f["labels"][...]
    nc = int(f.attrs["num_classes"])
    row = int(r.integers(len(lab)))
    v = pick(r, [nc, -1, 2**31 - 1, -2**31, nc + 100])
    lab[row] = v
    recreate(f, "labels", data=lab)
    return f"/labels row {row} = {v}"


def s_labels_length(f, r, dst):
    lab = f["labels"][...]
    v = pick(r, ["short", "long", "2d"])
    recreate(f, "labels", data=lab[:-1] if v == "short" else np.append(lab, lab[:1]) if v == "long" else lab[:, None])
    return f"/labels {v}"


def s_missing_dataset(f, r, dst):
    n = pick(r, ["images", "labels"])
    del f[n]
    return f"/{n} deleted"


def s_extra(f, r, dst):
    if r.random() < 0.5:
        f.create_dataset("extra", data=np.arange(7, dtype=np.float32))
        return "extra dataset /extra"
    f.attrs["comment"] = pick(r, ["made by hand", np.arange(3, dtype=np.int16)])
    return "extra root attribute comment"


def s_missing_attr(f, r, dst):
    a = pick(r, SHARD_REQUIRED)
    del f.attrs[a]
    return f"root attribute {a} deleted"


def s_attr_type(f, r, dst):
    a = pick(r, SHARD_INTS + ("format", "split", "mean", "std", "class_names"))
    v = f.attrs[a]
    if a in SHARD_INTS:
        new = pick(r, [str(int(v)), np.float32(v), np.array([int(v), int(v)], np.int32), np.float64(v) + 0.5])
    elif a in ("format", "split"):
        new = pick(r, [np.int32(1), np.array([v, v], dtype=h5py.string_dtype()), np.float32(1.0)])
    elif a == "class_names":
        new = pick(r, [np.arange(len(v), dtype=np.int32), "c0 c1 c2"])
    else:
        new = pick(r, [str(v), np.asarray(v, np.float64).astype(np.int32)])
    f.attrs[a] = new
    return f"root attribute {a} = {new!r}"


def s_attr_range(f, r, dst):
    a = pick(r, SHARD_INTS)
    cur = int(f.attrs[a])
    cand = {"height": [0, -1, 2**31 - 1, 65537, 2**32], "width": [0, -28, 2**31 - 1, 65537],
            "channels": [0, 65, -1, 2**31 - 1, 3], "num_classes": [0, -1, 2**31 - 1, 2**20 + 1, 5],
            "version": [0, 2, -1, 2**31 - 1], "shard_index": [-1, 2**31 - 1, cur + 7],
            "num_shards": [0, -1, 2**31 - 1, cur + 1]}[a]
    v = pick(r, cand)
    f.attrs[a] = int_attr(v)
    return f"root attribute {a} = {v} (was {cur})"


def s_stats(f, r, dst):
    a = pick(r, ["mean", "std", "std", "mean_len", "std_len"])
    c = len(f.attrs["std"])
    if a == "mean":
        v = pick(r, [np.nan, np.inf, -np.inf, 0.123])
    elif a == "std":
        v = pick(r, [np.nan, np.inf, -np.inf, 0.0, -0.25, 0.3])
    if a.endswith("_len"):
        name = a[:-4]
        f.attrs[name] = pick(r, [np.full(c + 1, 0.5, np.float32), np.zeros(0, np.float32)])
        return f"root attribute {name} with {len(f.attrs[name])} entries"
    f.attrs[a] = np.full(c, v, np.float32)
    return f"root attribute {a} = {v} (differs from the other shards)"


def s_class_names(f, r, dst):
    names = [x.decode() if isinstance(x, bytes) else str(x) for x in f.attrs["class_names"]]
    v = pick(r, ["fewer", "more", "empty", "renamed"])
    new = names[:-1] if v == "fewer" else names + ["extra"] if v == "more" else [] if v == "empty" else ["X"] + names[1:]
    f.attrs["class_names"] = np.array(new, dtype=h5py.string_dtype()) if new else np.zeros(0, dtype=h5py.string_dtype())
    return f"class_names {v} ({len(new)} entries)"


def s_external(f, r, dst):
    return write_external(f, pick(r, ["images", "images", "labels"]), dst, pick(r, ["same", "truncated", "missing", "shifted"]), r)


def s_strings(f, r, dst):
    v = pick(r, ["fixed", "vlen", "fixed_padded"])
    for k in ("format", "split", "source"):
        if k not in f.attrs:
            continue
        s = f.attrs[k]
        s = s.decode() if isinstance(s, bytes) else str(s)
        if v == "fixed":
            f.attrs[k] = np.bytes_(s)
        elif v == "fixed_padded":
            f.attrs.create(k, np.bytes_(s), dtype=h5py.string_dtype("ascii", len(s) + 5))
        else:
            f.attrs[k] = s
    names = [x.decode() if isinstance(x, bytes) else str(x) for x in f.attrs["class_names"]]
    if v.startswith("fixed"):
        f.attrs["class_names"] = np.array([n.encode() for n in names], dtype="S%d" % max(len(n) for n in names))
    else:
        f.attrs["class_names"] = np.array(names, dtype=h5py.string_dtype())
    return f"string attributes as {v} strings"


def s_layout(f, r, dst):
    n = pick(r, ["images", "images", "labels"])
    a = f[n][...]
    v = pick(r, ["contiguous", "gzip9", "shuffle_gzip", "fletcher32", "tiny_chunks"])
    del f[n]
    if v == "contiguous":
        f.create_dataset(n, data=a)
    elif v == "gzip9":
        f.create_dataset(n, data=a, compression="gzip", compression_opts=9)
    elif v == "shuffle_gzip":
        f.create_dataset(n, data=a, compression="gzip", shuffle=True)
    elif v == "fletcher32":
        f.create_dataset(n, data=a, fletcher32=True, chunks=True)
    else:
        f.create_dataset(n, data=a, chunks=(1,) + a.shape[1:])
    return f"/{n} rewritten {v} (same values)"


def s_link(f, r, dst):
    n = pick(r, ["images", "labels"])
    v = pick(r, ["soft_self", "soft_other", "external_same", "external_missing", "group"])
    a = f[n][...]
    del f[n]
    if v == "soft_self":
        f[n] = h5py.SoftLink("/" + n)
    elif v == "soft_other":
        f[n] = h5py.SoftLink("/labels" if n == "images" else "/images")
    elif v == "group":
        f.create_group(n)
    else:
        side = side_path(dst, "linked.h5")
        if v == "external_same":
            with h5py.File(side, "w") as g:
                g.create_dataset(n, data=a)
        f[n] = h5py.ExternalLink(side, "/" + n)
    return f"/{n} as {v}"


def s_identity(f, r, dst):
    a = pick(r, ["split", "format"])
    cur = f.attrs[a]
    cur = cur.decode() if isinstance(cur, bytes) else str(cur)
    v = {"split": ["test" if cur == "train" else "train", "", "train "],
         "format": ["hpctrain-checkpoint", "", "hpctrain-dataset ", "HPCTRAIN-DATASET"]}[a]
    new = pick(r, v)
    f.attrs[a] = new
    return f"root attribute {a} = {new!r}"


SHARD_STRUCT = [s_images_huge, s_images_unwritten, s_images_empty, s_images_rank, s_images_dtype, s_labels_dtype,
                s_labels_value, s_labels_length, s_missing_dataset, s_extra, s_missing_attr, s_attr_type,
                s_attr_range, s_stats, s_class_names, s_external, s_strings, s_layout, s_link, s_identity]


# ---- checkpoints
def tensors(f):
    out = []
    f.visititems(lambda n, o: out.append(n) if isinstance(o, h5py.Dataset) and n.split("/")[0] in
                 ("param", "momentum", "buffer", "rank_buffer") else None)
    return sorted(out)


def c_tensor_huge(f, r, dst):
    n = pick(r, tensors(f))
    shape = pick(r, [(2**32, 2**32), (2**31,), (2**62,), (2**20, 2**20, 2**20)])
    recreate(f, n, shape=shape, dtype=np.float32, chunks=(1,) * (len(shape) - 1) + (1024,), fletcher32=True)
    return f"{n} shape {shape}, never written"


def c_tensor_unwritten(f, r, dst):
    n = pick(r, tensors(f))
    shape = f[n].shape
    recreate(f, n, shape=shape, dtype=np.float32, chunks=True, fletcher32=True)
    return f"{n} {shape} with no stored chunks"


def c_tensor_shape(f, r, dst):
    n = pick(r, tensors(f))
    a = f[n][...]
    v = pick(r, ["transposed", "flat", "plus_one", "minus_one", "extra_dim"])
    b = {"transposed": a.T if a.ndim > 1 and a.shape[0] != a.shape[-1] else a.reshape(-1)[:, None],
         "flat": a.reshape(-1) if a.ndim > 1 else a[None, :], "plus_one": np.append(a.reshape(-1), 1.0).astype(a.dtype),
         "minus_one": a.reshape(-1)[:-1] if a.size > 1 else np.zeros(0, a.dtype), "extra_dim": a[..., None]}[v]
    recreate(f, n, data=b, chunks=True, fletcher32=True)
    return f"{n} {a.shape} -> {b.shape} ({v})"


def c_tensor_dtype(f, r, dst):
    n = pick(r, tensors(f))
    t = pick(r, [np.float64, np.float16, np.int32, np.uint8])
    recreate(f, n, data=f[n][...].astype(t), chunks=True, fletcher32=True)
    return f"{n} as {np.dtype(t).name}"


def c_tensor_missing(f, r, dst):
    n = pick(r, tensors(f))
    del f[n]
    return f"{n} deleted"


def c_tensor_extra(f, r, dst):
    g = pick(r, ["param", "momentum", "buffer"] + (["rank_buffer/0"] if "rank_buffer" in f else []))
    f.create_dataset(g + "/extra.weight", data=np.ones(3, np.float32), chunks=True, fletcher32=True)
    return f"extra tensor {g}/extra.weight"


def c_tensor_names(f, r, dst):
    names = bytes(f["meta/tensor_names"][...]).decode().split("\n")
    lines = [x for x in names if x]
    v = pick(r, ["drop", "dup", "rename", "add", "empty", "no_newline", "garbage"])
    k = int(r.integers(len(lines)))
    if v == "drop":
        del lines[k]
    elif v == "dup":
        lines.insert(k, lines[k])
    elif v == "rename":
        lines[k] = lines[k] + "x"
    elif v == "add":
        lines.append("param/ghost.weight")
    text = {"empty": b"", "no_newline": "\n".join(lines).encode(),
            "garbage": bytes(r.integers(0, 256, 64, dtype=np.uint8))}.get(v, "".join(x + "\n" for x in lines).encode())
    recreate(f, "meta/tensor_names", data=np.frombuffer(text, np.uint8) if text else np.zeros(0, np.uint8),
             chunks=True if text else None, fletcher32=bool(text))
    return f"meta/tensor_names {v}"


INT_BAD = {"step": ["pm1", -1, 10**9], "epoch": [-1, 10**6, 2**62], "step_in_epoch": [-1, 10**9, "spe_plus1"],
           "world_size": [0, -1, 10**6, 3], "global_batch": [0, -16, 2**40], "total_steps": [-1, 0, 2**62],
           "steps_per_epoch": [-1, 0, 10**9], "nonfinite_in_row": [-1, 10**9], "nonfinite_total": [-1, -2**63]}


def c_counter(f, r, dst):
    k = pick(r, sorted(set(INT_BAD) & set(f["ints"])))
    cur = int(f["ints/" + k][0])
    v = pick(r, INT_BAD[k])
    if v == "pm1":
        v = cur + pick(r, [-1, 1])
    elif v == "spe_plus1":
        v = int(f["ints/steps_per_epoch"][0]) + 1
    recreate(f, "ints/" + k, data=np.array([v], np.int64), chunks=True, fletcher32=True)
    return f"ints/{k} = {v} (was {cur})"


def c_counter_type(f, r, dst):
    k = pick(r, sorted(f["ints"]))
    cur = f["ints/" + k][...]
    v = pick(r, ["int32", "float64", "two", "scalar", "empty"])
    data = {"int32": cur.astype(np.int32), "float64": cur.astype(np.float64), "two": np.repeat(cur, 2),
            "scalar": cur.reshape(()), "empty": cur[:0]}[v]
    if v in ("scalar", "empty"):
        del f["ints/" + k]
        f.create_dataset("ints/" + k, data=data)
    else:
        recreate(f, "ints/" + k, data=data, chunks=True, fletcher32=True)
    return f"ints/{k} as {v}"


def c_floats(f, r, dst):
    k = pick(r, sorted(f["floats"]))
    v = pick(r, [np.nan, np.inf, -1.0, 0.0])
    recreate(f, "floats/" + k, data=np.array([v], np.float64), chunks=True, fletcher32=True)
    return f"floats/{k} = {v}"


def c_nan_stats(f, r, dst):
    bufs = [n for n in tensors(f) if n.startswith(("buffer/", "rank_buffer/"))]
    if not bufs:
        bufs = [n for n in tensors(f) if n.startswith("param/")]
    n = pick(r, bufs)
    a = f[n][...]
    i = int(r.integers(a.size))
    v = pick(r, [np.nan, np.inf, -np.inf] + ([-1.0] if "running_var" in n else []))
    a.reshape(-1)[i] = v
    recreate(f, n, data=a, chunks=True, fletcher32=True)
    return f"{n} element {i} = {v}"


def c_attrs(f, r, dst):
    a = pick(r, ["format", "version"])
    if r.random() < 0.2:
        del f.attrs[a]
        return f"root attribute {a} deleted"
    new = pick(r, ["hpctrain-dataset", "", "hpctrain-checkpoint ", np.int32(1)]) if a == "format" else \
        pick(r, [np.int64(0), np.int64(3), np.int64(-1), np.int64(2**40), "2", np.float64(2.5)])
    f.attrs[a] = new
    return f"root attribute {a} = {new!r}"


def c_strings(f, r, dst):
    k = pick(r, sorted(f["strings"]))
    cur = bytes(f["strings/" + k][...])
    v = pick(r, ["other_model", "empty", "garbage", "vlen"] if k == "model" else ["empty", "garbage", "cut", "vlen"])
    if v == "vlen":
        del f["strings/" + k]
        f.create_dataset("strings/" + k, data=cur.decode(), dtype=h5py.string_dtype())
        return f"strings/{k} as a variable-length string"
    text = {"other_model": b"mlp", "empty": b"", "garbage": bytes(r.integers(0, 256, 16, dtype=np.uint8)),
            "cut": cur[:len(cur) // 2]}[v]
    recreate(f, "strings/" + k, data=np.frombuffer(text, np.uint8) if text else np.zeros(0, np.uint8),
             chunks=True if text else None, fletcher32=bool(text))
    return f"strings/{k} {v}"


def c_external(f, r, dst):
    return write_external(f, pick(r, tensors(f)), dst, pick(r, ["same", "truncated", "missing", "shifted"]), r)


def c_layout(f, r, dst):
    n = pick(r, tensors(f) + ["ints/step", "meta/tensor_names"])
    a = f[n][...]
    v = pick(r, ["no_fletcher32", "gzip", "contiguous"])
    del f[n]
    if v == "no_fletcher32":
        f.create_dataset(n, data=a, chunks=True)
    elif v == "gzip":
        f.create_dataset(n, data=a, chunks=True, compression="gzip", fletcher32=True)
    else:
        f.create_dataset(n, data=a)
    return f"{n} rewritten {v} (same values)"


def c_rank_buffer(f, r, dst):
    if "rank_buffer" not in f:
        f.copy("buffer", "rank_buffer/0")
        return "rank_buffer/0 added to a version-1 file"
    ranks = sorted(f["rank_buffer"])
    v = pick(r, ["drop", "extra", "rename", "leading_zero"])
    if v == "drop":
        del f["rank_buffer/" + ranks[-1]]
    elif v == "extra":
        f.copy("rank_buffer/" + ranks[-1], "rank_buffer/%d" % len(ranks))
    elif v == "rename":
        f.move("rank_buffer/" + ranks[-1], "rank_buffer/r" + ranks[-1])
    else:
        f.move("rank_buffer/" + ranks[-1], "rank_buffer/0" + ranks[-1])
    return f"rank_buffer {v}"


def c_group_kind(f, r, dst):
    v = pick(r, ["group_as_dataset", "dataset_as_group"])
    if v == "group_as_dataset":
        g = pick(r, ["ints", "param", "strings", "meta"])
        del f[g]
        f.create_dataset(g, data=np.zeros(4, np.int64))
        return f"/{g} is a dataset"
    n = pick(r, tensors(f) + ["ints/step"])
    del f[n]
    f.create_group(n)
    return f"{n} is a group"


CKPT_STRUCT = [c_tensor_huge, c_tensor_unwritten, c_tensor_shape, c_tensor_dtype, c_tensor_missing, c_tensor_extra,
               c_tensor_names, c_counter, c_counter, c_counter_type, c_floats, c_nan_stats, c_attrs, c_strings,
               c_external, c_layout, c_rank_buffer, c_group_kind]


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


_SIDE_DIR = [None]


def apply(m, dst, side_dir):
    """Writes the mutant to dst (side files, if any, into side_dir); returns a one-line description."""
    _SIDE_DIR[0] = os.path.abspath(side_dir)
    if m.family == "byte":
        apply_byte(m, dst)
        return m.kind + " " + m.params.get("region", "")
    shutil.copyfile(m.target, dst)
    fn = globals()[m.params["fn"]]
    with h5py.File(dst, "r+") as f:
        return fn(f, np.random.default_rng(m.params["seed"]), dst)
