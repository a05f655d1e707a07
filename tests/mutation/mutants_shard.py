"""tests/mutation/mutants.py: structural mutations of a dataset shard (SHARD_STRUCT)."""
import h5py
import numpy as np

from mutants_h5 import int_attr, pick, recreate, side_path, write_external


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
