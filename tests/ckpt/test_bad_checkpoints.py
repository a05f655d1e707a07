"""Checkpoints that lie (issue 12, section 2): a real 2-rank checkpoint (fmnist_cnn with batch norm:
format version 2, per-rank buffers), then each bad case crafted with h5py. Tensor sizes: a [2^32, 2^32]
tensor (element count overflows), a [2^31] tensor in a 3.4 MB file (8 GiB declared), a tensor with no
stored chunks, one with part of its chunks, another element type, another filter, 9 dimensions, a
shape the model does not have, a tensor the model does not have, one missing from the index.
Progress counters: step_in_epoch = 10^9, epoch = -1, epoch = 10^6, epoch or cursor off by one, counters
out of range or contradicting each other, the step against the file name, world_size, non-finite lr.
For each: `hpctrain inspect` exits 2 naming the dataset/field and value; a resume under mpirun -np 2
with only that checkpoint exits 2 with the reason on both ranks, under `ulimit -v` 3 GiB (so no
multi-GiB allocation is even attempted), the file unchanged; with a valid older checkpoint beside it
(some cases), the resume falls back to it as documented (docs/checkpoint.md: warning, PATH.bad)."""
import functools
import hashlib
import resource

from common import *

ARGS = ["--data.synthetic", "true", "--data.synthetic_samples", "256", "--data.synthetic_height", "28",
        "--data.synthetic_width", "28", "--data.synthetic_channels", "1", "--model.name", "fmnist_cnn",
        "--train.global_batch", "32", "--train.epochs", "0", "--train.max_steps", "12", "--train.device", "cpu",
        "--train.eval", "false", "--checkpoint.every_steps", "4", "--checkpoint.keep_last", "10",
        "--train.log_every_steps", "100"]
VMEM = 3 << 30  # bytes of address space per process: the 8 GiB request of the old reader cannot happen

base = fresh_dir("base")
rc, out = run(ARGS + ["--run.dir", base], np_ranks=2)
if not check(rc == 0 and os.path.exists(ckpt(base, 12)), f"2-rank run writes checkpoints 4, 8, 12 (exit {rc})"):
    print(out)
    finish()
GOOD = ckpt(base, 12)
with h5py.File(GOOD, "r") as f:
    NAMES = [n for n in bytes(f["meta/tensor_names"][()]).decode().split("\n") if n]
    P = next(n for n in NAMES if n.startswith("param/") and f[n].ndim == 4)  # a conv weight
    PSHAPE = f[P].shape
    B = next(n for n in NAMES if n.startswith("buffer/"))
    INTS = {k: int(f["ints"][k][0]) for k in f["ints"]}
check(INTS["epoch"] == 1 and INTS["step_in_epoch"] == 4 and INTS["steps_per_epoch"] == 8,
      f"step 12 is step 4 of epoch 1 (8 steps per epoch): {INTS}")
p = subprocess.run([HT, "inspect", GOOD], capture_output=True, text=True)
check(p.returncode == 0 and "checksums: OK" in p.stdout and "not checked" in p.stdout,
      "inspect: the good checkpoint is valid, and inspect says what it did not check") or print(p.stdout, p.stderr)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def replace(name, shape=None, dtype=np.float32, data=None, chunks=None, write=True, **kw):
    """A mutation: dataset `name` recreated (fletcher32, chunked) with another shape, type or content."""
    def m(f):
        old = f[name][...]
        attrs = dict(f[name].attrs)
        del f[name]
        sh = shape or old.shape
        d = f.create_dataset(name, shape=sh, dtype=dtype, chunks=chunks or True, fletcher32=True, **kw)
        for k, v in attrs.items():
            d.attrs[k] = v
        if write:
            d[...] = old.reshape(sh).astype(dtype) if data is None else data
    return m


def set_value(name, value):
    """The first element of dataset `name` set to `value` (rewritten: its checksum stays valid)."""
    def m(f):
        a = f[name][...]
        a.flat[0] = value
        f[name][...] = a
    return m


def set_first(group, key, value):
    """Element 0 of dataset GROUP/KEY (a progress counter in ints, a value in floats) set to `value`."""
    def m(f):
        f[group][key][0] = value
    return m


set_int = functools.partial(set_first, "ints")
set_float = functools.partial(set_first, "floats")


def damage_group_header(group):
    """Flips a byte inside the group's object header (version 2: checksummed), after h5py closed the
    file: HDF5 then cannot read the group's links. Returns the byte offset to flip."""
    def m(f):
        return h5py.h5o.get_info(f[group].id).addr + 12
    return m


def del_int(key):
    def m(f):
        del f["ints"][key]
    return m


def set_index(names):
    def m(f):
        del f["meta/tensor_names"]
        f.create_dataset("meta/tensor_names", data=np.frombuffer("".join(n + "\n" for n in names).encode(), np.uint8),
                         chunks=True, fletcher32=True)
    return m


def partly_stored(f):
    old = f[P][...]
    del f[P]
    d = f.create_dataset(P, shape=old.shape, dtype=np.float32, chunks=(1,) + old.shape[1:], fletcher32=True)
    d[0] = old[0]  # one chunk of PSHAPE[0]


def extra_tensor(f):  # with its momentum: consistent in itself, only the model knows it is foreign
    for g in ("param", "momentum"):
        f.create_dataset(g + "/extra.weight", data=np.ones(3, np.float32), chunks=True, fletcher32=True)
    set_index(NAMES + ["param/extra.weight", "momentum/extra.weight"])(f)


def shape_the_model_lacks(f):  # parameter and momentum alike
    replace(P, shape=(flat(PSHAPE),))(f)
    replace("momentum/" + P[6:], shape=(flat(PSHAPE),))(f)


def flat(shape):
    n = 1
    for s in shape:
        n *= s
    return n


# (case, mutation, what the error must name, fall back when an older checkpoint is valid?, inspect can
# tell: False where only the model knows, and inspect then says valid and names what it did not check)
CASES = [
    ("tensor [2^32, 2^32]", replace(P, shape=(2**32, 2**32), chunks=(1024, 1024), write=False), ["/" + P, "4294967296"], False),
    ("tensor [2^31] in a 3.4 MB file", replace(P, shape=(2**31,), chunks=(2**18,), write=False), ["/" + P, "2147483648"], True),
    ("tensor without stored chunks", replace(P, write=False), ["/" + P, "no stored data"], True),
    ("tensor with part of its chunks", partly_stored, ["/" + P, "chunks stored"], False),
    ("tensor as float64", replace(P, dtype=np.float64), ["/" + P, "element type"], False),
    ("tensor with gzip", replace(P, compression="gzip"), ["/" + P, "filter"], False),
    ("tensor with 9 dimensions", replace(P, shape=(1,) * 8 + (flat(PSHAPE),)), ["/" + P, "9 dimensions"], False),
    ("tensor shape the model lacks", shape_the_model_lacks, ["/" + P, f"[{flat(PSHAPE)}]"], True, False),
    ("tensor the model lacks", extra_tensor, ["/param/extra.weight", "[3]"], False, False),
    ("momentum of another shape", replace("momentum/" + P[6:], shape=(flat(PSHAPE),)), ["/momentum/" + P[6:], "/" + P],
     False),
    ("momentum missing from the index", set_index([n for n in NAMES if n != "momentum/" + P[6:]]),
     ["/momentum/" + P[6:], "missing"], False),
    ("per-rank buffer shape", replace("rank_buffer/1/" + B[7:], shape=(2, 16)), ["/rank_buffer/1/" + B[7:], "[2, 16]"],
     False),
    ("tensor with a NaN", set_value(P, float("nan")), ["/" + P, "nan"], True),
    ("running variance -1", set_value(B.replace("running_mean", "running_var"), -1.0),
     ["/" + B.replace("running_mean", "running_var"), "-1"], False),
    ("step_in_epoch = 10^9", set_int("step_in_epoch", 10**9), ["step_in_epoch", "1000000000"], True),
    ("epoch = -1", set_int("epoch", -1), ["ints/epoch", "-1"], True),
    ("epoch = 10^6", set_int("epoch", 10**6), ["epoch = 1000000"], True),
    ("epoch off by one", set_int("epoch", 0), ["epoch = 0", "step = 12"], False),
    ("cursor off by one", set_int("step_in_epoch", 3), ["step_in_epoch = 3", "step = 12"], False),
    ("step_in_epoch = -1", set_int("step_in_epoch", -1), ["step_in_epoch", "-1"], False),
    ("nonfinite_total = -1", set_int("nonfinite_total", -1), ["nonfinite_total", "-1"], False),
    ("nonfinite_in_row > nonfinite_total", set_int("nonfinite_in_row", 5), ["nonfinite_in_row", "5"], False),
    ("steps_per_epoch = 0", set_int("steps_per_epoch", 0), ["steps_per_epoch", "0"], False),
    ("total_steps below step", set_int("total_steps", 5), ["total_steps = 5"], False),
    ("step against the file name", set_int("step", 13), ["ints/step = 13"], False),
    ("world_size = 2^40", set_int("world_size", 2**40), ["world_size", "1099511627776"], False),
    ("world_size = 0", set_int("world_size", 0), ["world_size = 0"], False),
    ("global_batch not a multiple of world_size", set_int("global_batch", 33), ["global_batch", "33"], False),
    ("epoch_offset off", set_int("epoch_offset", 1), ["epoch_offset = 1"], False),
    ("steps_per_epoch missing", del_int("steps_per_epoch"), ["/ints/steps_per_epoch", "missing"], False),
    ("lr = nan", set_float("lr", float("nan")), ["floats/lr", "nan"], False),
    ("loss_scale = 0", set_float("loss_scale", 0.0), ["floats/loss_scale"], False),
    # A group whose metadata checksum fails is damage there, not a missing tensor.
    ("/param header damaged", damage_group_header("param"), ["the file is damaged at /param:", "cannot be reached"], True),
    ("/meta header damaged", damage_group_header("meta"), ["the file is damaged at /meta:"], True),
]


def limited():
    resource.setrlimit(resource.RLIMIT_AS, (VMEM, VMEM))


def resume(run_dir):
    c = [MPIEXEC, "--oversubscribe", "--bind-to", "none", "-np", "2", HT, "train"] + ARGS + ["--run.dir", run_dir]
    try:
        p = subprocess.run(c, capture_output=True, text=True, timeout=120, preexec_fn=limited)
    except subprocess.TimeoutExpired:
        return 124, "TIMEOUT (hang)"
    return p.returncode, p.stdout + p.stderr


def rank_message(out, r):
    """The error rank r printed (up to the next rank's message)."""
    tag = f"hpctrain: error (rank {r})"
    i = out.find(tag)
    if i < 0:
        return ""
    j = out.find("hpctrain: error (rank ", i + len(tag))
    return out[i:j if j >= 0 else len(out)]


for i, (name, mutate, expect, fallback, *rest) in enumerate(CASES):
    by_inspect = rest[0] if rest else True
    d = fresh_dir(f"case{i}")
    shutil.copytree(base, d)
    bad = ckpt(d, 12)
    with h5py.File(bad, "r+") as f:
        flip = mutate(f)
    if isinstance(flip, int):  # raw damage at that byte, once h5py has closed the file
        with open(bad, "r+b") as raw:
            raw.seek(flip)
            b = raw.read(1)
            raw.seek(flip)
            raw.write(bytes([b[0] ^ 0xFF]))
    before = sha(bad)
    # inspect: exit 2, naming the dataset and the value
    p = subprocess.run([HT, "inspect", bad], capture_output=True, text=True, timeout=60, preexec_fn=limited)
    io = p.stdout + p.stderr
    if by_inspect:
        check(p.returncode == 2 and "FAILED" in io and all(e in io for e in expect),
              f"{name}: inspect exits 2 naming {expect} (exit {p.returncode})") or print(io[-1500:])
    else:
        check(p.returncode == 0 and "not checked" in io and "against the model" in io,
              f"{name}: inspect (no model) says what it could not check (exit {p.returncode})") or print(io[-1500:])
    # resume with only the bad checkpoint: exit 2 on both ranks, each naming it; the file untouched
    only = fresh_dir(f"case{i}_only")
    shutil.copytree(base, only)
    for s in (4, 8):
        os.remove(ckpt(only, s))
    shutil.copy(bad, ckpt(only, 12))
    rc, out = resume(only)
    msgs = [rank_message(out, r) for r in (0, 1)]
    check(rc == 2 and all(m and all(e in m for e in expect) for m in msgs),
          f"{name}: resume exits 2, both ranks naming {expect} (exit {rc})") or print(out[-3000:])
    check("Cannot allocate" not in out and "bad_alloc" not in out, f"{name}: no allocation failure under ulimit -v")
    check(os.path.exists(ckpt(only, 12)) and sha(ckpt(only, 12)) == before and not os.path.exists(ckpt(only, 12) + ".bad"),
          f"{name}: the checkpoint is left as it was")
    if fallback:
        rc, out = resume(d)
        check(rc == 0 and f"resumed from {ckpt(d, 8)}: step 8" in out and "trying the previous checkpoint" in out
              and all(e in out for e in expect),
              f"{name}: with step 8 valid beside it, the resume warns naming {expect} and falls back (exit {rc})") \
            or print(out[-3000:])
        check(os.path.exists(bad + ".bad") and sha(bad + ".bad") == before,
              f"{name}: the bad file is kept aside unchanged as .bad")
        ok, why = same_state(GOOD, ckpt(d, 12))
        check(ok, f"{name}: the rerun from step 8 reaches the same step-12 state ({why})")
finish()
