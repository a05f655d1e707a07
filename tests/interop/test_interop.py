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
    print(f"{model_name}: {len(a)} tensors reproduced exactly; strict load and logits identical")
    return ck


import torchvision  # noqa: E402

round_trip("resnet18", torchvision.models.resnet18(num_classes=100), torch.randn(2, 3, 64, 64))
round_trip("resnet18_cifar", ht_torch.build_model("resnet18_cifar", 10), torch.randn(2, 3, 32, 32))
round_trip("fmnist_cnn", ht_torch.build_model("fmnist_cnn", 10, 1, 28, 28), torch.randn(2, 1, 28, 28))
round_trip("mlp", ht_torch.build_model("mlp", 10, 1, 28, 28), torch.randn(2, 1, 28, 28))

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
