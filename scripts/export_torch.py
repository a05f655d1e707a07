#!/usr/bin/python3
"""hpctrain checkpoint -> PyTorch state_dict that loads into the matching torchvision/PyTorch module
with load_state_dict(strict=True):

  /usr/bin/python3 scripts/export_torch.py runs/r18/checkpoints/step-00001200.h5 r18.pth --model resnet18_cifar
  # in PyTorch: m = torchvision.models.resnet18(num_classes=10); m.conv1 = nn.Conv2d(3, 64, 3, 1, 1,
  #   bias=False); m.maxpool = nn.Identity(); m.load_state_dict(torch.load("r18.pth"))

param/<name> and buffer/<name> become <name> (float32, bit for bit); optimizer state (momentum/) is
left out; each BatchNorm's num_batches_tracked comes from the count import_torch.py kept, else the
checkpoint's step. --model defaults to the checkpoint's strings/model (or its config's model.name)."""
import argparse
import json
import re
import sys
from collections import OrderedDict

import torch

sys.path.insert(0, __import__("os").path.dirname(__file__))
import ht_torch  # noqa: E402


def model_from_config(strings):
    m = re.search(r"^\s*name\s*=\s*(\S+)", strings.get("config", "").split("[model]", 1)[-1], re.M)
    return m.group(1) if m and "[model]" in strings.get("config", "") else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", help="hpctrain checkpoint (.h5)")
    ap.add_argument("output", help="state_dict file to write (torch.save)")
    ap.add_argument("--model", default=None, choices=ht_torch.MODELS)
    ap.add_argument("--height", type=int, default=28, help="input height (fmnist_cnn, mlp)")
    ap.add_argument("--width", type=int, default=28, help="input width (fmnist_cnn, mlp)")
    ap.add_argument("--mlp-hidden", type=int, default=None)
    args = ap.parse_args()

    tensors, ints, _, strings = ht_torch.read_checkpoint(args.checkpoint)
    name = args.model or strings.get("model") or model_from_config(strings)
    if name not in ht_torch.MODELS:
        print(f"export_torch: {args.checkpoint}: model unknown ({name}); pass --model", file=sys.stderr)
        return 2
    sd = OrderedDict()
    for key, a in tensors:
        kind, _, tname = key.partition("/")
        if kind in ("param", "buffer"):
            sd[tname] = torch.from_numpy(a.copy())
    head = ht_torch.head_weight_name(name)
    if head not in sd:
        print(f"export_torch: {args.checkpoint}: no param/{head}: not a {name} checkpoint", file=sys.stderr)
        return 2
    num_classes = sd[head].shape[0]
    channels = sd["conv1.weight"].shape[1] if "conv1.weight" in sd else 1
    hidden = args.mlp_hidden or (sd["fc1.weight"].shape[0] if name == "mlp" else 64)
    if name == "mlp":
        channels = sd["fc1.weight"].shape[1] // (args.height * args.width)
    model = ht_torch.build_model(name, num_classes, channels, args.height, args.width, hidden)
    counts = json.loads(strings[ht_torch.NBT_KEY]) if ht_torch.NBT_KEY in strings else {}
    for bn in ht_torch.bn_names(model):
        sd[bn + ".num_batches_tracked"] = torch.tensor(int(counts.get(bn, ints.get("step", 0))), dtype=torch.long)
    # The module's own order, so the file looks like model.state_dict().
    ordered = OrderedDict()
    for k in model.state_dict().keys():
        if k not in sd:
            print(f"export_torch: {args.checkpoint}: tensor {k} of {name} is missing", file=sys.stderr)
            return 2
        ordered[k] = sd.pop(k)
    if sd:
        print(f"export_torch: {args.checkpoint}: tensors not in {name}: {', '.join(sd)}", file=sys.stderr)
        return 2
    try:
        model.load_state_dict(ordered, strict=True)
    except RuntimeError as e:
        print(f"export_torch: {args.checkpoint} does not load into {name}:\n{e}", file=sys.stderr)
        return 2
    torch.save(ordered, args.output)
    print(f"export_torch: {args.output}: model {name}, {num_classes} classes, {len(ordered)} tensors, "
          f"step {ints.get('step', 0)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
