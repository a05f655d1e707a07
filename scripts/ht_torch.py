"""Shared helpers of scripts/import_torch.py and scripts/export_torch.py: hpctrain's models written in
PyTorch (parameter names and shapes equal to hpctrain's, which follow torchvision's state_dict), and
reading/writing the hpctrain checkpoint format (io/checkpoint/checkpoint_format.hpp) with h5py.

Checkpoint layout: root attributes format = "hpctrain-checkpoint" (fixed-length string), version = 1
or 2 (int64; 2 adds /rank_buffer/<rank>/<name>, each rank's own buffers, which export ignores: it
takes /buffer/<name>, their average); float32 datasets /param/<name>, /buffer/<name>, /momentum/<name>, each chunked with the
fletcher32 filter; /meta/tensor_names (uint8 text, one tensor name per line); /ints/<key> int64 [1];
/floats/<key> float64 [1]; /strings/<key> uint8 text.
Use /usr/bin/python3 (Debian's torch, torchvision, h5py, numpy)."""
import json
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn as nn  # noqa: F401

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402

FORMAT = "hpctrain-checkpoint"
VERSION = 1  # written (no per-rank buffers)
READ_VERSIONS = (1, 2)
MODELS = ("resnet18", "resnet18_cifar", "resnet50", "fmnist_cnn", "mlp")


def build_model(name, num_classes, channels=3, height=32, width=32, mlp_hidden=64):
    """The PyTorch module whose state_dict matches hpctrain's model `name` tensor for tensor
    (definitions in scripts/torch_models.py, shared with the tests and the PyTorch baseline)."""
    if name not in MODELS:
        raise SystemExit(f"unknown model '{name}' (one of {', '.join(MODELS)})")
    return torch_models.build(name, num_classes, channels, height, width, mlp_hidden)


def head_weight_name(model):
    """The weight of `model`'s last linear layer, the head (C++: head_param_names in src/train/training_state.cpp)."""
    return {"fmnist_cnn": "fc2.weight", "mlp": "fc3.weight"}.get(model, "fc.weight")


def load_state_dict_file(path):
    """A state_dict from torch.save output: a plain state_dict, a {"state_dict": ...} or {"model": ...}
    training checkpoint, or a whole module; DistributedDataParallel's "module." prefix is removed."""
    obj = torch.load(path, map_location="cpu")
    if isinstance(obj, nn.Module):
        obj = obj.state_dict()
    for key in ("state_dict", "model", "model_state_dict"):
        if isinstance(obj, dict) and key in obj and isinstance(obj[key], dict):
            obj = obj[key]
    if not isinstance(obj, dict):
        raise SystemExit(f"{path}: not a state_dict (found {type(obj).__name__})")
    return {(k[7:] if k.startswith("module.") else k): v for k, v in obj.items()}


def _write(f, name, array):
    a = np.ascontiguousarray(array)
    shape = a.shape if a.ndim > 0 else (1,)
    maxshape = tuple(None if s == 0 else s for s in shape)
    d = f.create_dataset(name, data=a.reshape(shape), chunks=True if a.size else tuple(1 for _ in shape),
                         maxshape=maxshape, fletcher32=True)
    if a.ndim == 0:
        d.attrs.create("scalar", np.int64(1))


def _text(s):
    return np.frombuffer(s.encode(), dtype=np.uint8)


def write_checkpoint(path, tensors, ints=None, floats=None, strings=None):
    """Writes an hpctrain checkpoint: `tensors` is an ordered list of (name, float32 numpy array) with
    names "param/...", "buffer/..." or "momentum/..."."""
    ints = {"step": 0, "epoch": 0, "step_in_epoch": 0, **(ints or {})}
    with h5py.File(path, "w", libver=("v110", "latest")) as f:
        f.attrs.create("format", np.bytes_(FORMAT))
        f.attrs.create("version", np.int64(VERSION))
        _write(f, "meta/tensor_names", _text("".join(n + "\n" for n, _ in tensors)))
        for name, a in tensors:
            _write(f, name, np.asarray(a, dtype=np.float32))
        for k, v in ints.items():
            _write(f, "ints/" + k, np.array([v], dtype=np.int64))
        for k, v in (floats or {}).items():
            _write(f, "floats/" + k, np.array([v], dtype=np.float64))
        for k, v in (strings or {}).items():
            if v:
                _write(f, "strings/" + k, _text(v))


def read_checkpoint(path):
    """(tensors as an ordered list of (name, numpy float32), ints, floats, strings)."""
    with h5py.File(path, "r") as f:
        fmt = f.attrs.get("format")
        fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
        if fmt != FORMAT:
            raise SystemExit(f"{path}: root attribute format = '{fmt}', expected '{FORMAT}'")
        if int(f.attrs.get("version", -1)) not in READ_VERSIONS:
            raise SystemExit(f"{path}: root attribute version = {f.attrs.get('version')}, expected one of {READ_VERSIONS}")
        names = bytes(f["meta/tensor_names"][()]).decode().split("\n")
        tensors = []
        for n in names:
            if not n:
                continue
            d = f[n]
            a = d[()].astype(np.float32, copy=False)
            if "scalar" in d.attrs:
                a = a.reshape(())
            tensors.append((n, a))
        ints = {k: int(v[0]) for k, v in f["ints"].items()} if "ints" in f else {}
        floats = {k: float(v[0]) for k, v in f["floats"].items()} if "floats" in f else {}
        strings = {k: bytes(v[()]).decode() for k, v in f["strings"].items()} if "strings" in f else {}
    return tensors, ints, floats, strings


def bn_names(module):
    """Names of the BatchNorm layers of `module` (whose state_dict carries num_batches_tracked)."""
    return [n for n, m in module.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


NBT_KEY = "torch_num_batches_tracked"  # strings/<key>: JSON {bn layer name: count}, kept for exact round trips


def nbt_json(counts):
    return json.dumps(counts, sort_keys=True)
