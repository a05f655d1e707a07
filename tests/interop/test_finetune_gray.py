"""Fine-tuning an RGB ResNet-18 on gray data (issue 23): scripts/import_torch.py --channels 1 sums
conv1.weight over RGB, and the result trains in hpctrain on 1-channel 28x28 data with --init-from
--reset-head. A randomly initialised torchvision resnet18 (1000 classes) saved with
torch.save(model.state_dict()) stands in for the pretrained file (no weights can be downloaded here).

Checks:
- the import exits 0 and says what it did to conv1, in one line; conv1.weight is stored as the
  float32 rounding of the float64 sum over the input channels, every other tensor bit for bit;
- conv1 of the original RGB weights on a gray image replicated to 3 channels equals conv1 of the
  imported weights on the gray image (float64: 1e-12 with the unrounded sum, the float32 rounding's
  bound with the stored one), and so do the whole network's logits (PyTorch, float64);
- hpctrain's own forward of the imported checkpoint on the gray image matches PyTorch's original RGB
  model on the replicated image (through ht_unit_tests [.interop], when its path is given);
- --channels 2 and --channels 0 exit 2 naming the counts;
- hpctrain train on synthetic 1x28x28 data, 10 classes: the 3-channel import is refused (exit 2,
  naming conv1.weight); the 1-channel import with --reset-head exits 0, says the head was reset, and
  with lr 0 keeps conv1 exactly; configs/finetune_resnet18_fmnist.ini trains with its warm-up.
Arguments: [path of ht_unit_tests]. Environment: HT_BIN (hpctrain), HT_SOURCE_DIR."""
import configparser
import json
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch
import torch.nn.functional as F
import torchvision

SRC = os.environ.get("HT_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "scripts"))
import ht_torch  # noqa: E402

PY = "/usr/bin/python3"
IMPORT = os.path.join(SRC, "scripts", "import_torch.py")
CONFIG = os.path.join(SRC, "configs", "finetune_resnet18_fmnist.ini")
HT_BIN = os.environ.get("HT_BIN", os.path.join(SRC, "build", "hpctrain"))
UNIT_BIN = sys.argv[1] if len(sys.argv) > 1 else None
TMP = tempfile.mkdtemp(prefix="ht_finetune_gray_")
FAILURES = []
torch.manual_seed(2023)


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        FAILURES.append(what)
    return cond


def sh(args, timeout=300, env=None):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, OMP_NUM_THREADS="2", **(env or {})))
    return p.returncode, p.stdout + p.stderr


# ---- a stand-in for torchvision's pretrained resnet18: random weights, non-trivial BN statistics ----
src_model = torchvision.models.resnet18()  # 1000 classes, RGB stem [64, 3, 7, 7]
for i, mod in enumerate(src_model.modules()):
    if isinstance(mod, torch.nn.BatchNorm2d):
        mod.running_mean.normal_(0, 0.1)
        mod.running_var.uniform_(0.5, 2.0)
        mod.num_batches_tracked.fill_(1000 + i)
        mod.weight.data.uniform_(0.5, 1.5)
        mod.bias.data.normal_(0, 0.1)
src_model.eval()
src_sd = {k: v.clone() for k, v in src_model.state_dict().items()}
pth = os.path.join(TMP, "resnet18.pth")
torch.save(src_model.state_dict(), pth)

# ---- import with --channels 1 ----
ck1 = os.path.join(TMP, "init_gray.h5")
rc, out = sh([PY, IMPORT, pth, ck1, "--model", "resnet18", "--channels", "1"])
line = "import_torch: conv1.weight [64, 3, 7, 7] -> [64, 1, 7, 7]: summed over RGB " \
       "(a gray image replicated to 3 channels gives the same output)"
check(rc == 0 and line in out.splitlines(), f"import --channels 1 exits 0 ({rc}) and says: {line}") or print(out)
tensors, ints, _, strings = ht_torch.read_checkpoint(ck1)
got = dict(tensors)
w_rgb = src_sd["conv1.weight"]
w_sum64 = w_rgb.to(torch.float64).sum(dim=1, keepdim=True)
w_gray = torch.from_numpy(got["param/conv1.weight"])
check(tuple(w_gray.shape) == (64, 1, 7, 7), f"param/conv1.weight has shape {tuple(w_gray.shape)}")
check(torch.equal(w_gray, w_sum64.to(torch.float32)),
      "param/conv1.weight is the float32 rounding of the float64 sum over RGB, bit for bit")
others = [k for k in src_sd if k != "conv1.weight" and not k.endswith("num_batches_tracked")]


def h5_name(k):
    return ("buffer/" if k.endswith(("running_mean", "running_var")) else "param/") + k


same = [k for k in others if torch.equal(torch.from_numpy(got[h5_name(k)]), src_sd[k])]
check(len(same) == len(others) == 101,
      f"every other tensor ({len(same)} of {len(others)}) is the state_dict's, bit for bit")
check(ints.get("channels") == 1 and ints.get("num_classes") == 1000,
      f"ints/channels = {ints.get('channels')}, ints/num_classes = {ints.get('num_classes')}")
check("summed over RGB" in strings.get("source", ""), f"strings/source says so: {strings.get('source')!r}")

# ---- the identity behind it: conv1(replicate(gray), W) == conv1(gray, sum_c W_c) ----
gray = torch.rand(4, 1, 28, 28, dtype=torch.float64)  # Fashion-MNIST-sized, any normalisation
rgb = gray.repeat(1, 3, 1, 1)
y_rgb = F.conv2d(rgb, w_rgb.to(torch.float64), stride=2, padding=3)
y_exact = F.conv2d(gray, w_sum64, stride=2, padding=3)
y_stored = F.conv2d(gray, w_gray.to(torch.float64), stride=2, padding=3)
scale = y_rgb.abs().max().item()
d_exact = (y_rgb - y_exact).abs().max().item()
d_stored = (y_rgb - y_stored).abs().max().item()
# Bound of the float32 rounding of the weights: sum over the 49 taps of |gray| |W| 2^-24.
bound = (F.conv2d(gray.abs(), w_sum64.abs(), stride=2, padding=3) * 2.0 ** -24).max().item()
check(d_exact <= 1e-12 * scale, f"conv1, float64 sum: max |difference| {d_exact:.2e} (outputs up to {scale:.2f})")
check(0 <= d_stored <= bound, f"conv1, stored float32 weights: max |difference| {d_stored:.2e} <= {bound:.2e} "
      "(float32 rounding of the summed weights)")

# The whole network, float64: the 1-channel model with the imported tensors vs the RGB original.
gray_model = ht_torch.build_model("resnet18", 1000, 1, 28, 28)
gray_sd = gray_model.state_dict()
for k in gray_sd:
    if k.endswith("num_batches_tracked"):
        continue
    gray_sd[k] = torch.from_numpy(got[h5_name(k)])
gray_model.load_state_dict(gray_sd, strict=True)
gray_model.eval()
with torch.no_grad():
    a = src_model.double()(rgb)
    b = gray_model.double()(gray)
rel = ((a - b).norm() / a.norm()).item()
check(rel < 1e-6, f"resnet18 logits (PyTorch, float64): 1-channel import on gray vs RGB original on "
      f"replicated gray: relative error {rel:.2e}")
src_model.float()

# hpctrain's forward of the imported checkpoint (float32) against PyTorch's RGB original.
if UNIT_BIN:
    inp, outp = os.path.join(TMP, "input.h5"), os.path.join(TMP, "logits.h5")
    x = gray.to(torch.float32)
    with h5py.File(inp, "w") as f:
        f["input"] = x.numpy()
        f.attrs["model"] = "resnet18"
        f.attrs["num_classes"] = 1000
        f.attrs["mlp_hidden"] = 64
    rc, out = sh([UNIT_BIN, "[.interop]"], env={"HT_INTEROP_CKPT": ck1, "HT_INTEROP_INPUT": inp,
                                                "HT_INTEROP_OUTPUT": outp})
    if check(rc == 0, f"ht_unit_tests [.interop] on the imported checkpoint (exit {rc})"):
        with h5py.File(outp, "r") as f:
            ours = torch.from_numpy(f["logits"][()])
        with torch.no_grad():
            theirs = src_model(x.repeat(1, 3, 1, 1))
        rel = ((ours - theirs).norm() / theirs.norm()).item()
        check(rel < 1e-4, f"hpctrain's logits on gray vs PyTorch's RGB original on replicated gray: "
              f"relative error {rel:.2e}")
    else:
        print(out)

# ---- other channel counts: exit 2 naming them ----
rc, out = sh([PY, IMPORT, pth, os.path.join(TMP, "c2.h5"), "--model", "resnet18", "--channels", "2"])
check(rc == 2 and "--channels 2" in out and "3 input channel" in out and "[64, 3, 7, 7]" in out,
      f"--channels 2 exits 2 naming both counts ({rc}): {out.strip()}")
check(not os.path.exists(os.path.join(TMP, "c2.h5")), "and writes nothing")
rc, out = sh([PY, IMPORT, pth, os.path.join(TMP, "c0.h5"), "--model", "resnet18", "--channels", "0"])
check(rc == 2 and "--channels 0" in out, f"--channels 0 exits 2 ({rc})")

# ---- hpctrain train on 1-channel 28x28 data ----
if not (os.path.isfile(HT_BIN) and os.access(HT_BIN, os.X_OK)):
    print(f"skipped: no hpctrain binary at {HT_BIN} (set HT_BIN)")
    if not FAILURES:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(1 if FAILURES else 77)

DATA = ["--data.synthetic", "true", "--data.synthetic_channels", "1", "--data.synthetic_height", "28",
        "--data.synthetic_width", "28", "--data.synthetic_classes", "10", "--data.synthetic_samples", "64"]
BASE = DATA + ["--model.name", "resnet18", "--train.device", "cpu", "--train.global_batch", "8",
               "--train.epochs", "0", "--train.eval", "false", "--train.log_every_steps", "1"]

ck3 = os.path.join(TMP, "init_rgb.h5")
rc, out = sh([PY, IMPORT, pth, ck3, "--model", "resnet18"])
check(rc == 0, f"import without --channels keeps the RGB stem (exit {rc})")
rc, out = sh([HT_BIN, "train", *BASE, "--train.max_steps", "1", "--run.dir", os.path.join(TMP, "rgb"),
              "--init-from", ck3, "--reset-head"])
err = [ln for ln in out.splitlines() if "error" in ln]
check(rc == 2 and "does not fit this run: /param/conv1.weight is [64, 3, 7, 7] there (the checkpoint holds model "
      "resnet18)" in out and "import_torch.py --channels 1" in out and "is invalid" not in out,
      f"the RGB import on 1-channel data is refused with exit 2 ({rc}) as incompatible, naming conv1.weight and the "
      f"way out: {err[-1] if err else out[-300:]}")

rd = os.path.join(TMP, "gray_lr0")
rc, out = sh([HT_BIN, "train", *BASE, "--train.max_steps", "2", "--optim.lr", "0", "--optim.momentum", "0",
              "--optim.weight_decay", "0", "--run.dir", rd, "--init-from", ck1, "--reset-head"])
msg = f"hpctrain: initialised parameters from {ck1} (head reset: fc.weight fc.bias); training starts at step 0"
check(rc == 0 and msg in out, f"--init-from the 1-channel import --reset-head trains (exit {rc}) and says: {msg}") \
    or print(out[-3000:])
if rc == 0:
    final = sorted(f for f in os.listdir(os.path.join(rd, "checkpoints")) if f.endswith(".h5"))[-1]
    t2, i2, _, _ = ht_torch.read_checkpoint(os.path.join(rd, "checkpoints", final))
    g2 = dict(t2)
    check(i2.get("step") == 2, f"final checkpoint at step {i2.get('step')}")
    check(np.array_equal(g2["param/conv1.weight"], got["param/conv1.weight"]),
          "with lr 0 the trained conv1.weight is the imported summed one, bit for bit")
    kept = [k for k in got if k.startswith("param/") and not k.startswith("param/fc.")]
    check(all(np.array_equal(g2[k], got[k]) for k in kept), f"and so are all {len(kept)} non-head parameters")
    check(g2["param/fc.weight"].shape == (10, 512) and g2["param/fc.bias"].shape == (10,),
          f"the head has 10 classes: fc.weight {g2['param/fc.weight'].shape}")

# The shipped config, on the same synthetic data: it parses, trains, and warms up as documented.
rd = os.path.join(TMP, "config")
rc, out = sh([HT_BIN, "train", "--config", CONFIG, *DATA, "--train.device", "cpu", "--train.global_batch", "8",
              "--train.epochs", "0", "--train.max_steps", "3", "--train.eval", "false", "--run.dir", rd,
              "--init-from", ck1, "--reset-head"])
check(rc == 0 and "head reset: fc.weight fc.bias" in out,
      f"configs/finetune_resnet18_fmnist.ini with --init-from --reset-head trains (exit {rc})") or print(out[-3000:])
if rc == 0:
    with open(os.path.join(rd, "metrics.jsonl")) as f:
        steps = [j for j in map(json.loads, f) if j.get("event") == "step"]
    ini = configparser.ConfigParser(inline_comment_prefixes=("#", ";"))
    ini.read(os.path.join(rd, "config.ini"))  # the effective configuration, as the run saved it
    lr, warm = ini.getfloat("optim", "lr"), ini.getint("optim", "warmup_steps")
    want = [lr * s / warm for s in (1, 2, 3)]
    have = [j["lr"] for j in steps]
    check(warm > 3 and len(have) == 3 and all(abs(h - w) <= 1e-6 * lr for h, w in zip(have, want)),
          f"config lr {lr}, warm-up {warm} steps: lr of steps 1-3 {have} = lr x s / warm-up")
    check(all(np.isfinite(j["loss"]) for j in steps), f"finite losses {[round(j['loss'], 4) for j in steps]}")

print(f"finetune_gray: {'FAILED: ' + '; '.join(FAILURES) if FAILURES else 'all checks passed'}"
      + (f" (files kept in {TMP})" if FAILURES else ""))
if not FAILURES:
    shutil.rmtree(TMP, ignore_errors=True)  # about 400 MB of state_dicts, imports and checkpoints
sys.exit(1 if FAILURES else 0)
