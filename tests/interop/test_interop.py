"""PyTorch interop (scripts/import_torch.py, scripts/export_torch.py): randomly initialised torchvision /
PyTorch models saved to files (no weights can be downloaded here) are imported into hpctrain checkpoints
and exported back. Checks: the checkpoint has hpctrain's layout (format/version attributes, tensor index,
fletcher32 on every dataset, param/ and buffer/ names); the round trip reproduces every tensor exactly
(values, dtype, order, num_batches_tracked); the export loads with strict=True into a fresh module and
gives bit-identical logits; a mismatching state_dict exits 2 naming the tensor."""
import os
import subprocess
import sys
import tempfile

import h5py
import torch

SRC = os.environ.get("HT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "scripts"))
import ht_torch  # noqa: E402

PY = "/usr/bin/python3"
TMP = tempfile.mkdtemp(prefix="ht_interop_")
torch.manual_seed(1234)


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run(script, *args, rc=0, subprocess_run=False):
    """Runs a script's main() in this process (torch is imported once), or as a real subprocess."""
    if subprocess_run:
        p = subprocess.run([PY, script, *args], capture_output=True, text=True)
    else:
        import contextlib
        import importlib
        import io
        mod = importlib.import_module(os.path.basename(script)[:-3])
        out, err = io.StringIO(), io.StringIO()
        old_argv, sys.argv = sys.argv, [script, *args]
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = mod.main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 2
        finally:
            sys.argv = old_argv
        p = Result(code, out.getvalue(), err.getvalue())
    assert p.returncode == rc, f"{script} {args}: exit {p.returncode}, want {rc}\n{p.stdout}\n{p.stderr}"
    return p


def randomise_bn(m):
    # Non-trivial running statistics and counts, so that buffers are really carried.
    for i, mod in enumerate(m.modules()):
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.normal_()
            mod.running_var.uniform_(0.5, 2.0)
            mod.num_batches_tracked.fill_(100 + i)
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.normal_(0, 0.1)


def check_layout(path, model):
    sd = model.state_dict()
    params = {n for n, _ in model.named_parameters()}
    with h5py.File(path, "r") as f:
        assert f.attrs["format"] == b"hpctrain-checkpoint", f.attrs["format"]
        assert int(f.attrs["version"]) == 1
        names = [n for n in bytes(f["meta/tensor_names"][()]).decode().split("\n") if n]
        want = [("param/" if k in params else "buffer/") + k for k in sd if not k.endswith("num_batches_tracked")]
        assert names == want, (names[:5], want[:5])
        assert int(f["ints/step"][0]) == 0

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                assert obj.fletcher32, f"{name} has no fletcher32 checksum"
                assert obj.chunks is not None, name
        f.visititems(visit)
        for n in names:
            assert f[n].dtype == "float32" and f[n].shape == tuple(sd[n.split("/", 1)[1]].shape), n


UNIT_BIN = sys.argv[1] if len(sys.argv) > 1 else None  # ht_unit_tests: our forward ([.interop])


def our_forward(ck, model_name, x, num_classes, mlp_hidden=64):
    """hpctrain's forward (evaluation mode) on checkpoint `ck` for input x, through ht_unit_tests."""
    inp, out = os.path.join(TMP, "input.h5"), os.path.join(TMP, "logits.h5")
    with h5py.File(inp, "w") as f:
        f["input"] = x.numpy()
        f.attrs["model"] = model_name
        f.attrs["num_classes"] = num_classes
        f.attrs["mlp_hidden"] = mlp_hidden
    env = dict(os.environ, HT_INTEROP_CKPT=ck, HT_INTEROP_INPUT=inp, HT_INTEROP_OUTPUT=out, OMP_NUM_THREADS="2")
    p = subprocess.run([UNIT_BIN, "[.interop]"], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    with h5py.File(out, "r") as f:
        return torch.from_numpy(f["logits"][()])


def round_trip(model_name, model, x, extra_import=()):
    model.eval()
    randomise_bn(model)
    src = os.path.join(TMP, f"{model_name}.pth")
    ck = os.path.join(TMP, f"{model_name}.h5")
    back = os.path.join(TMP, f"{model_name}_back.pth")
    torch.save(model.state_dict(), src)
    run(os.path.join(SRC, "scripts/import_torch.py"), src, ck, "--model", model_name, *extra_import)
    check_layout(ck, model)
    run(os.path.join(SRC, "scripts/export_torch.py"), ck, back)  # model name from the checkpoint
    a, b = torch.load(src), torch.load(back)
    assert list(a) == list(b), "order/names differ"
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert torch.equal(a[k], b[k]), f"{k} differs after the round trip"
    fresh = ht_torch.build_model(model_name, a[[k for k in a if k.endswith("weight")][-1]].shape[0],
                                 x.shape[1], x.shape[2], x.shape[3])
    fresh.load_state_dict(b, strict=True)
    fresh.eval()
    with torch.no_grad():
        assert torch.equal(model(x), fresh(x)), "logits differ after the round trip"
    msg = ""
    if UNIT_BIN:
        # import -> our forward; export -> PyTorch's forward on the exported weights: same logits.
        ours = our_forward(ck, model_name, x, b[[k for k in b if k.endswith("weight")][-1]].shape[0])
        with torch.no_grad():
            theirs = fresh(x)
        rel = ((ours - theirs).norm() / theirs.norm()).item()
        worst = ((ours - theirs).abs() / theirs.abs().clamp_min(1e-3 * theirs.abs().max())).max().item()
        assert rel < 1e-4, f"{model_name}: logits differ from PyTorch: relative error {rel:.3e}"
        msg = f"; our logits vs PyTorch: relative error {rel:.2e} (2-norm), {worst:.2e} (worst element)"
    print(f"{model_name}: {len(a)} tensors reproduced exactly; strict load and logits identical{msg}")
    return ck


import torchvision  # noqa: E402

round_trip("resnet18", torchvision.models.resnet18(num_classes=100), torch.randn(2, 3, 64, 64))
round_trip("resnet18_cifar", ht_torch.build_model("resnet18_cifar", 10), torch.randn(2, 3, 32, 32))
round_trip("fmnist_cnn", ht_torch.build_model("fmnist_cnn", 10, 1, 28, 28), torch.randn(2, 1, 28, 28))
round_trip("mlp", ht_torch.build_model("mlp", 10, 1, 28, 28), torch.randn(2, 1, 28, 28))

# Fine-tuning workflow: a 100-class resnet18_cifar state_dict -> checkpoint -> hpctrain train --init-from
# --reset-head on 10 classes. With lr 0 the final checkpoint's parameters are exactly the imported ones,
# except the head, which is freshly initialised with the new class count.
HT_BIN = os.environ.get("HT_BIN")
if HT_BIN:
    src_model = ht_torch.build_model("resnet18_cifar", 100)
    randomise_bn(src_model)
    sd_path, ck100 = os.path.join(TMP, "r18c100.pth"), os.path.join(TMP, "r18c100.h5")
    torch.save(src_model.state_dict(), sd_path)
    run(os.path.join(SRC, "scripts/import_torch.py"), sd_path, ck100, "--model", "resnet18_cifar")
    rd = os.path.join(TMP, "finetune")
    p = subprocess.run([HT_BIN, "train", "--data.synthetic", "true", "--data.synthetic_samples", "64",
                        "--model.name", "resnet18_cifar", "--train.global_batch", "4", "--train.max_steps", "1",
                        "--train.epochs", "0", "--train.eval", "false", "--train.device", "cpu", "--optim.lr", "0",
                        "--optim.momentum", "0", "--optim.weight_decay", "0", "--run.dir", rd,
                        "--init-from", ck100, "--reset-head"], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    final = sorted(f for f in os.listdir(os.path.join(rd, "checkpoints")) if f.endswith(".h5"))[-1]
    tensors, _, _, _ = ht_torch.read_checkpoint(os.path.join(rd, "checkpoints", final))
    got = {k: v for k, v in tensors}
    src_sd = src_model.state_dict()
    for n, prm in src_model.named_parameters():
        if n.startswith("fc."):
            assert got["param/" + n].shape[0] == 10, (n, got["param/" + n].shape)
        else:
            assert (torch.from_numpy(got["param/" + n]) == src_sd[n]).all(), f"{n} not taken from the import"
    print("fine-tune: --init-from an imported 100-class checkpoint with --reset-head trains 10 classes; "
          "all non-head parameters are the imported ones")

# A state_dict that does not match the model: exit 2, naming the tensor.
bad = torchvision.models.resnet18(num_classes=10).state_dict()
bad["layer1.0.conv1.weight"] = torch.zeros(64, 64, 1, 1)
torch.save(bad, os.path.join(TMP, "bad.pth"))
p = run(os.path.join(SRC, "scripts/import_torch.py"), os.path.join(TMP, "bad.pth"), os.path.join(TMP, "bad.h5"),
        "--model", "resnet18", rc=2, subprocess_run=True)  # the command line itself, with its exit code
assert "layer1.0.conv1.weight" in p.stderr, p.stderr
# DDP-style "module." prefixes and {"state_dict": ...} wrappers are accepted.
wrapped = {"state_dict": {"module." + k: v for k, v in torchvision.models.resnet18(num_classes=10).state_dict().items()}}
torch.save(wrapped, os.path.join(TMP, "wrapped.pth"))
run(os.path.join(SRC, "scripts/import_torch.py"), os.path.join(TMP, "wrapped.pth"), os.path.join(TMP, "w.h5"),
    "--model", "resnet18")
print("interop: all checks passed")
