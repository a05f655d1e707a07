"""`hpctrain prepare` output read back with h5py and h5dump (no hpctrain code on the reading side):
Fashion-MNIST from gzipped IDX, CIFAR-10 from binary batches, uneven shard counts, every schema
attribute; bad input exits 2 naming the file; `inspect` prints schema and statistics."""
import gzip
import os
import subprocess
import tempfile

import h5py
import numpy as np

from common import check, finish, run

rng = np.random.default_rng(1)


def idx(path, arr, gz):
    head = bytes([0, 0, 8, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    data = head + arr.astype(np.uint8).tobytes()
    with (gzip.open(path + ".gz", "wb") if gz else open(path, "wb")) as f:
        f.write(data)


def read_split(out, split, num):
    imgs, labs = [], []
    for k in range(num):
        with h5py.File(os.path.join(out, f"{split}-{k:05d}-of-{num:05d}.h5"), "r") as f:
            a = dict(f.attrs)
            check(a["format"] == b"hpctrain-dataset" and a["version"] == 2 and a["split"] == split.encode(),
                  f"{split} {k}: format/version/split {a}")
            # Version 2: HDF5 1.10's checksummed format, fixed-length strings only.
            check(f.id.get_create_plist().get_version()[0] >= 2, f"{split} {k}: superblock version < 2")
            for key in a:
                t = f.attrs.get_id(key).get_type()
                check(not (isinstance(t, h5py.h5t.TypeStringID) and t.is_variable_str()),
                      f"{split} {k}: attribute {key} is a variable-length string")
            check(a["shard_index"] == k and a["num_shards"] == num, f"{split} {k}: shard attrs")
            for key in ("num_classes", "height", "width", "channels", "class_names", "mean", "std", "source"):
                check(key in a, f"{split} {k}: attribute {key} missing")
            check(f["images"].dtype == np.uint8 and f["labels"].dtype == np.int32, f"{split} {k}: dtypes")
            check(f["images"].chunks[1:] == f["images"].shape[1:], f"{split} {k}: chunks not whole samples")
            check(f["images"].compression is None, f"{split} {k}: compressed by default")
            check(f["images"].fletcher32 and f["labels"].fletcher32, f"{split} {k}: data chunks not checksummed (fletcher32)")
            imgs.append(f["images"][:])
            labs.append(f["labels"][:])
            attrs = a
    return np.concatenate(imgs), np.concatenate(labs), attrs


with tempfile.TemporaryDirectory() as root:
    # Fashion-MNIST, gzipped IDX, 13 train samples in 3 shards (4, 4, 5).
    fin, fout = os.path.join(root, "fin"), os.path.join(root, "fout")
    os.makedirs(fin)
    tri = rng.integers(0, 256, (13, 28, 28), dtype=np.uint8)
    trl = rng.integers(0, 10, 13).astype(np.uint8)
    tei = rng.integers(0, 256, (5, 28, 28), dtype=np.uint8)
    tel = rng.integers(0, 10, 5).astype(np.uint8)
    idx(os.path.join(fin, "train-images-idx3-ubyte"), tri, True)
    idx(os.path.join(fin, "train-labels-idx1-ubyte"), trl, True)
    idx(os.path.join(fin, "t10k-images-idx3-ubyte"), tei, False)
    idx(os.path.join(fin, "t10k-labels-idx1-ubyte"), tel, False)
    rc, out, err = run(["prepare", "--format", "fashion-mnist", "--input", fin, "--output", fout, "--shards", "3"])
    check(rc == 0, f"prepare fashion-mnist: rc {rc} {err}")
    im, lb, a = read_split(fout, "train", 3)
    check(np.array_equal(im, tri[..., None]) and np.array_equal(lb, trl), "fashion-mnist train round trip")
    check(abs(a["mean"][0] - tri.mean() / 255) < 1e-6, f"mean {a['mean']} vs {tri.mean() / 255}")
    check(abs(a["std"][0] - (tri / 255.0).std()) < 1e-5, f"std {a['std']}")
    check(list(a["class_names"])[:2] == [b"T-shirt/top", b"Trouser"], f"class names {a['class_names']}")
    im, lb, _ = read_split(fout, "test", 1)
    check(np.array_equal(im, tei[..., None]) and np.array_equal(lb, tel), "fashion-mnist test round trip")
    d = subprocess.run(["h5dump", "-H", os.path.join(fout, "train-00002-of-00003.h5")], capture_output=True, text=True)
    check(d.returncode == 0 and 'DATASET "images"' in d.stdout and "( 5, 28, 28, 1 )" in d.stdout,
          f"h5dump: {d.returncode} {d.stdout[:400]}")
    rc, out, err = run(["inspect", os.path.join(fout, "train-00000-of-00003.h5")])
    check(rc == 0 and "label histogram" in out and "chunks [" in out and "class_names" in out, f"inspect: {rc} {out} {err}")

    # CIFAR-10 binary: 5 batches of 2 records + test of 3; 10 train samples in 4 shards (2, 3, 2, 3).
    cin, cout = os.path.join(root, "cin"), os.path.join(root, "cout")
    os.makedirs(cin)
    recs = {}
    for name, n in [(f"data_batch_{b}", 2) for b in range(1, 6)] + [("test_batch", 3)]:
        r = rng.integers(0, 256, (n, 3073), dtype=np.uint8)
        r[:, 0] %= 10
        r.tofile(os.path.join(cin, name + ".bin"))
        recs[name] = r
    rc, out, err = run(["prepare", "--format", "cifar10", "--input", cin, "--output", cout, "--shards", "4"])
    check(rc == 0, f"prepare cifar10: rc {rc} {err}")
    train = np.concatenate([recs[f"data_batch_{b}"] for b in range(1, 6)])
    im, lb, a = read_split(cout, "train", 4)
    want = train[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    check(np.array_equal(im, want) and np.array_equal(lb, train[:, 0].astype(np.int32)), "cifar10 train round trip")
    check(np.allclose(a["mean"], (want / 255.0).mean(axis=(0, 1, 2)), atol=1e-6), f"cifar mean {a['mean']}")
    check(a["class_names"][0] == b"airplane" and a["channels"] == 3, "cifar attrs")
    im, lb, _ = read_split(cout, "test", 1)
    check(np.array_equal(im, recs["test_batch"][:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)), "cifar10 test")

    # Bad input through the CLI: exit 2 naming the file.
    with open(os.path.join(cin, "data_batch_3.bin"), "ab") as f:
        f.write(b"\x01\x02")
    rc, out, err = run(["prepare", "--format", "cifar10", "--input", cin, "--output", cout])
    check(rc == 2 and "data_batch_3.bin" in err, f"bad cifar: rc {rc} {err}")
    with open(os.path.join(fin, "t10k-labels-idx1-ubyte"), "wb") as f:
        f.write(b"\x1f\x8bnot really gzip")
    os.remove(os.path.join(fin, "train-images-idx3-ubyte.gz"))
    rc, out, err = run(["prepare", "--format", "fashion-mnist", "--input", fin, "--output", fout])
    check(rc == 2 and "train-images-idx3-ubyte" in err and "not found" in err, f"missing idx: rc {rc} {err}")
    rc, out, err = run(["prepare", "--format", "mnist", "--input", fin, "--output", fout])
    check(rc == 2 and "mnist" in err, f"bad format: rc {rc} {err}")

    # A checkpoint file is routed to checkpoint inspection, never read as a dataset.
    ck = os.path.join(root, "step-00000001.h5")
    with h5py.File(ck, "w") as f:
        f.attrs["format"] = "hpctrain-checkpoint"
    rc, out, err = run(["inspect", ck])
    check("checkpoint" in (out + err) and "hpctrain-dataset" not in err, f"checkpoint inspect: rc {rc} {out} {err}")
finish()
