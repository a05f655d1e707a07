"""tests/mutation/mutants.py: structural mutations of a checkpoint (CKPT_STRUCT)."""
import h5py
import numpy as np

from mutants_h5 import pick, recreate, write_external


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
