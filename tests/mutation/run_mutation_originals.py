"""tests/mutation/run_mutation.py: making the originals (shard sets and checkpoints) that the mutants
are made from."""
import os
import shutil
import struct

import h5py
import numpy as np

from run_mutation_env import CKPT_TRAIN, log, run_cmd


# ---- originals ----------------------------------------------------------------------------------
def write_idx(d, rng):
    os.makedirs(d, exist_ok=True)
    for name, n in (("train", 64), ("t10k", 32)):
        img = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        lab = rng.integers(0, 10, n).astype(np.uint8)
        with open(os.path.join(d, f"{name}-images-idx3-ubyte"), "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, 28, 28) + img.tobytes())
        with open(os.path.join(d, f"{name}-labels-idx1-ubyte"), "wb") as f:
            f.write(struct.pack(">II", 0x801, n) + lab.tobytes())


def write_legacy(src_dir, dst_dir):
    """The shards of src_dir rewritten as hpctrain wrote them before metadata checksums: HDF5's earliest
    file format, variable-length strings, int32 attributes, no filters (kept so that the run still
    covers today's shards after the writer changes)."""
    os.makedirs(dst_dir, exist_ok=True)
    for name in sorted(os.listdir(src_dir)):
        with h5py.File(os.path.join(src_dir, name), "r") as s, h5py.File(os.path.join(dst_dir, name), "w", libver="earliest") as d:
            img, lab = s["images"][...], s["labels"][...]
            d.create_dataset("images", data=img, chunks=(min(len(img), 83),) + img.shape[1:])
            d.create_dataset("labels", data=lab.astype(np.int32))

            def text(v):
                return v.decode() if isinstance(v, bytes) else str(v)
            a = s.attrs
            d.attrs["format"] = "hpctrain-dataset"
            d.attrs["version"] = np.int32(1)
            d.attrs["split"] = text(a["split"])
            for k in ("shard_index", "num_shards", "num_classes", "height", "width", "channels"):
                d.attrs[k] = np.int32(int(a[k]))
            d.attrs["class_names"] = np.array([text(x) for x in a["class_names"]], dtype=h5py.string_dtype())
            d.attrs["mean"] = np.asarray(a["mean"], np.float32).reshape(-1)
            d.attrs["std"] = np.asarray(a["std"], np.float32).reshape(-1)
            d.attrs["source"] = text(a["source"]) if "source" in a else "mutation run"


def make_originals(env, root):
    """Shard sets (prepare, prepare --gzip, legacy) and checkpoints (2-rank run: steps 2 and 5, version 2;
    1-rank run: step 3, version 1). Returns the originals list for mutants.plan."""
    orig = os.path.join(root, "originals")
    shutil.rmtree(orig, ignore_errors=True)
    os.makedirs(orig)
    tmp = os.path.join(root, "tmp")
    os.makedirs(tmp, exist_ok=True)
    write_idx(os.path.join(orig, "idx"), np.random.default_rng(12))

    def must(cmd, what):
        rc, out, dur, to, left = run_cmd(env, cmd, 600, orig, tmp)
        if rc != 0 or to or left:
            log(out)
            raise SystemExit(f"mutation run: making the originals failed ({what}, exit {rc})")
        return out
    for name, extra in (("prepare", []), ("prepare_gzip", ["--gzip", "4"])):
        must([env.bin, "prepare", "--format", "fashion-mnist", "--input", "idx", "--output", name, "--shards", "2"] + extra,
             name)
    write_legacy(os.path.join(orig, "prepare"), os.path.join(orig, "legacy"))
    mpi = [env.mpiexec, "--oversubscribe", "--bind-to", "none", "-np"]
    must(mpi + ["2", env.bin, "train"] + CKPT_TRAIN + ["--train.max_steps", "5", "--data.dir", "prepare", "--run.dir", "run_np2"],
         "2-rank run")
    must(mpi + ["1", env.bin, "train"] + CKPT_TRAIN + ["--train.max_steps", "3", "--data.dir", "prepare", "--run.dir", "run_np1"],
         "1-rank run")
    out = []
    for name, w in (("prepare", 0.22), ("prepare_gzip", 0.13), ("legacy", 0.2)):
        d = os.path.join(orig, name)
        out.append(dict(name=name, type="shards", dir=d, weight=w, files=[os.path.join(d, f) for f in sorted(os.listdir(d))]))
    for run, step, np_, w in (("run_np2", 2, 2, 0.17), ("run_np2", 5, 2, 0.16), ("run_np1", 3, 1, 0.12)):
        p = os.path.join(orig, run, "checkpoints", "step-%08d.h5" % step)
        keep = os.path.join(orig, "ckpt_%s_step%d.h5" % (run, step))
        shutil.copyfile(p, keep)
        out.append(dict(name=f"ckpt_np{np_}_step{step}", type="checkpoint", files=[keep], weight=w, step=step, ranks=np_,
                        data=os.path.join(orig, "prepare")))
    return out
