"""Training on a folder of images prepared by `hpctrain prepare --format imagefolder` on 2 ranks:
ResNet-18 (CIFAR stem) with random crop and flip, 2 ranks, evaluation each epoch. Exact resume: a run
stopped by SIGTERM after step 4 and rerun ends with a checkpoint bitwise equal to the uninterrupted
run's, and the same loss at every step. Elastic resume: the step-4 checkpoint resumes on 1 rank and
finishes on the same learning-rate schedule."""
import subprocess

from PIL import Image

from common import *

rng = np.random.default_rng(3)
photos = fresh_dir("photos")
for c, name in enumerate(("boat", "car", "tree")):
    os.makedirs(os.path.join(photos, name))
    for i in range(16):
        w, h = (int(v) for v in rng.integers(24, 90, 2))
        img = rng.integers(0, 80, (h, w, 3)).astype(np.uint8)
        img[..., c] += 150  # a class-coloured image, so the model has something to learn
        Image.fromarray(img).save(os.path.join(photos, name, f"{i:02d}." + ("jpg" if i % 2 else "png")))

data = fresh_dir("data")
p = subprocess.run([MPIEXEC, "--oversubscribe", "--bind-to", "none", "-np", "2", HT, "prepare", "--format",
                    "imagefolder", "--input", photos, "--output", data, "--size", "32", "--val-fraction", "0.25",
                    "--shards", "2"], capture_output=True, text=True, timeout=300)
check(p.returncode == 0, f"prepare on 2 ranks exits 0 (got {p.returncode})") or print(p.stdout, p.stderr)

BASE = ["--data.dir", data, "--model.name", "resnet18_cifar", "--train.global_batch", "12", "--train.epochs", "0",
        "--train.max_steps", "6", "--train.device", "cpu", "--data.crop_padding", "4", "--data.flip", "true",
        "--checkpoint.every_steps", "2", "--checkpoint.keep_last", "100", "--train.log_every_steps", "100",
        "--train.eval", "true", "--train.threads", "1"]

ref = fresh_dir("straight")
rc, out = run(BASE + ["--run.dir", ref], np_ranks=2, timeout=600)
check(rc == 0, f"straight 2-rank run on the prepared folder exits 0 (got {rc})") or print(out)
ref_losses = losses(ref)
check(sorted(ref_losses) == list(range(1, 7)), f"straight run logged steps 1..6 ({sorted(ref_losses)})")

work = fresh_dir("stopped")
rc, out = run(BASE + ["--run.dir", work], np_ranks=2, env=faults(signal_at_step=4, signal_rank=1), timeout=600)
check(rc == 75, f"SIGTERM on rank 1 after step 4: exit 75 (got {rc})") or print(out)
elastic = fresh_dir("elastic")
shutil.rmtree(elastic, ignore_errors=True)
shutil.copytree(work, elastic)
rc, out = run(BASE + ["--run.dir", work], np_ranks=2, timeout=600)
check(rc == 0, f"rerun resumes and finishes (got {rc})") or print(out)
same, why = same_state(ckpt(ref, 6), ckpt(work, 6))
check(same, f"exact resume: final checkpoint equal to the uninterrupted run's: {why}")
got = losses(work)
check(all(got[s] == ref_losses[s] for s in range(1, 7)), "exact resume: the loss at every step bitwise equal")

rc, out = run(BASE + ["--run.dir", elastic], np_ranks=1, timeout=600)
check(rc == 0, f"elastic resume on 1 rank finishes (got {rc})") or print(out)
check("saved with world_size 2, now 1" in out, "elastic resume says it resumed a world_size-2 checkpoint")
el = losses(elastic)
check(sorted(el) == list(range(1, 7)) and all(np.isfinite(el[s]) for s in el), f"elastic: steps 1..6 logged ({sorted(el)})")
check(all(lrs(elastic)[s] == lrs(ref)[s] for s in range(1, 7)), "elastic: learning rate identical at every step")
check(state(ckpt(elastic, 6))[1]["world_size"] == 1, "elastic: the final checkpoint is a world_size-1 one")

# The recipes for such folders (configs/resnet50_imagenet.ini, configs/finetune_resnet18_folder.ini)
# load and take a step on shards prepared at 256 pixels (random resized crop and centre crop to 224).
data256 = fresh_dir("data256")
p = subprocess.run([HT, "prepare", "--format", "imagefolder", "--input", photos, "--output", data256, "--size", "256",
                    "--val-fraction", "0.25"], capture_output=True, text=True, timeout=300)
check(p.returncode == 0, f"prepare at 256 exits 0 (got {p.returncode})") or print(p.stdout, p.stderr)
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for cfg in ("resnet50_imagenet.ini", "finetune_resnet18_folder.ini"):
    rd = fresh_dir("recipe_" + cfg)
    rc, out = run(["--config", os.path.join(SRC, "configs", cfg), "--data.dir", data256, "--run.dir", rd,
                   "--train.max_steps", "1", "--train.global_batch", "4", "--train.eval_batch", "8",
                   "--train.device", "cpu", "--data.loader_threads", "2"], timeout=600)
    check(rc == 0 and "test top1" in out, f"configs/{cfg}: one step and an evaluation at 224 pixels (exit {rc})") or print(out)
finish()
