"""A shard that another process holds open for writing (HDF5 file locking) is reported as locked, with
HDF5's own reason and the HDF5_USE_FILE_LOCKING remedy, by `inspect` and by training on 2 ranks
(exit 2 on every rank); not as "truncated or corrupt". Once the writer closes it, both succeed."""
import os
import tempfile

from common import *

tmp = tempfile.mkdtemp(prefix="ht_locked_")
data = os.path.join(tmp, "data")
rc, out, err = run(["prepare", "--format", "fashion-mnist", "--input", "/usr/share/datasets/fashion-mnist",
                    "--output", data, "--shards", "2"])
check(rc == 0, f"prepare exits 0 (got {rc}): {err[-500:]}")
shard = os.path.join(data, "train-00000-of-00002.h5")
train = ["train", "--config", os.path.join(os.path.dirname(__file__), "../../configs/fmnist_cnn.ini"),
         "--data.dir", data, "--run.dir", os.path.join(tmp, "run"), "--train.max_steps", "1", "--train.eval", "false",
         "--train.device", "cpu"]

writer = h5py.File(shard, "r+")  # holds HDF5's exclusive file lock while open
for what, args, ranks in (("inspect", ["inspect", shard], None), ("train on 2 ranks", train, 2)):
    rc, out, err = run(args, np_ranks=ranks, timeout=120)
    text = out + err
    check(rc == 2, f"{what} on a locked shard exits 2 (got {rc})")
    check("unable to lock file" in text and "HDF5_USE_FILE_LOCKING" in text and shard in text,
          f"{what} names the shard, the lock and HDF5_USE_FILE_LOCKING: {text[-800:]}")
    check("truncated or corrupt" not in text, f"{what} does not call a locked shard corrupt")
writer.close()
rc, out, err = run(["inspect", shard])
check(rc == 0, f"inspect succeeds once the writer has closed the shard (got {rc}): {err[-500:]}")

if FAILURES:
    raise SystemExit(f"{len(FAILURES)} check(s) failed")
print("locked shard: named as locked, with the remedy, by inspect and by training")
