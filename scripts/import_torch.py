#!/usr/bin/python3
"""PyTorch state_dict -> hpctrain checkpoint, for `hpctrain train --init-from FILE` (add --reset-head
when the number of classes differs: the fc layer then starts from hpctrain's initialisation).

  /usr/bin/python3 scripts/import_torch.py resnet18.pth init.h5 --model resnet18
  hpctrain train --config configs/... --model.name resnet18 --init-from init.h5 --reset-head

The state_dict must match the PyTorch form of `--model` (see scripts/ht_torch.py) name for name and
shape for shape, except the head (fc.*) whose class count may differ; it is checked with
load_state_dict(strict=True) on that module. Parameters become param/<name>, BatchNorm running
statistics buffer/<name>; num_batches_tracked (an integer count hpctrain does not use) is kept as
text so that export_torch.py reproduces it. Tensors are stored as float32 (exactly, when they are).
Exit code 2 on a mismatch, naming the tensor.

Grayscale data (Fashion-MNIST, 1 channel) with an RGB model: `--channels 1` replaces conv1.weight
[out, 3, k, k] by its sum over the 3 input channels, [out, 1, k, k] (summed in float64, rounded once
to float32), and says so in one line. conv1 with the summed filter on a gray image gives the same
output as conv1 with the RGB filter on that image replicated to 3 channels. Any other change of the
channel count is an error (exit 2) naming both counts.

  /usr/bin/python3 scripts/import_torch.py resnet18.pth init.h5 --model resnet18 --channels 1
  hpctrain train --config configs/finetune_resnet18_fmnist.ini --init-from init.h5 --reset-head

Worked example: docs/checkpoint.md, "Fine-tuning a pretrained ResNet-18"."""
import argparse
import sys

import numpy as np
import torch

sys.path.insert(0, __import__("os").path.dirname(__file__))
import ht_torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("state_dict", help="file written by torch.save (state_dict, {'state_dict': ...} or a module)")
    ap.add_argument("output", help="hpctrain checkpoint to write (.h5)")
    ap.add_argument("--model", default="resnet18", choices=ht_torch.MODELS)
    ap.add_argument("--channels", type=int, default=None,
                    help="input channels of the model (default: those of conv1/fc1 in the state_dict); 1 with a "
                         "3-channel conv1 sums conv1.weight over RGB, for grayscale data")
    ap.add_argument("--height", type=int, default=28, help="input height (fmnist_cnn, mlp)")
    ap.add_argument("--width", type=int, default=28, help="input width (fmnist_cnn, mlp)")
    ap.add_argument("--mlp-hidden", type=int, default=64)
    args = ap.parse_args()

    sd = ht_torch.load_state_dict_file(args.state_dict)
    head = ht_torch.head_weight_name(args.model)
    if head not in sd:
        print(f"import_torch: {args.state_dict}: no tensor '{head}' (is this a {args.model} state_dict?)",
              file=sys.stderr)
        return 2
    num_classes = sd[head].shape[0]
    channels = args.channels
    stem_note = ""
    if channels is not None and channels < 1:
        print(f"import_torch: --channels {channels}: must be at least 1", file=sys.stderr)
        return 2
    if channels is None:
        channels = sd["conv1.weight"].shape[1] if "conv1.weight" in sd else 1
        if args.model == "mlp":
            channels = sd["fc1.weight"].shape[1] // (args.height * args.width)
    elif args.model != "mlp" and "conv1.weight" in sd and sd["conv1.weight"].dim() == 4 \
            and sd["conv1.weight"].shape[1] != channels:
        w = sd["conv1.weight"]
        have = w.shape[1]
        if not (have == 3 and channels == 1):
            print(f"import_torch: --channels {channels}: conv1.weight of {args.state_dict} has shape {list(w.shape)}, "
                  f"{have} input channel(s); only 3 (RGB) -> 1 (gray, by summing over RGB) can be adapted. "
                  f"Leave out --channels to import a {have}-channel model", file=sys.stderr)
            return 2
        if not torch.is_floating_point(w):
            print(f"import_torch: tensor conv1.weight has dtype {w.dtype}, expected floating point", file=sys.stderr)
            return 2
        # Sum in float64, rounded once when stored as float32: conv(gray, sum_c W_c) = sum_c conv(gray, W_c).
        sd = dict(sd)
        sd["conv1.weight"] = w.detach().to(torch.float64).sum(dim=1, keepdim=True)
        stem_note = (f"conv1.weight {list(w.shape)} -> {list(sd['conv1.weight'].shape)}: summed over RGB "
                     f"(a gray image replicated to 3 channels gives the same output)")
    model = ht_torch.build_model(args.model, num_classes, channels, args.height, args.width, args.mlp_hidden)
    try:
        model.load_state_dict(sd, strict=True)  # names and shapes exactly those of the model
    except RuntimeError as e:
        print(f"import_torch: {args.state_dict} does not match model {args.model}:\n{e}", file=sys.stderr)
        return 2

    param_names = {n for n, _ in model.named_parameters()}
    tensors, nbt = [], {}
    for name, t in model.state_dict().items():
        if name.endswith("num_batches_tracked"):
            nbt[name[: -len(".num_batches_tracked")]] = int(t.item())
            continue
        src = sd[name]
        if not torch.is_floating_point(src):
            print(f"import_torch: tensor {name} has dtype {src.dtype}, expected floating point", file=sys.stderr)
            return 2
        a = src.detach().to(torch.float32).contiguous().numpy()
        if not np.all(np.isfinite(a)):
            print(f"import_torch: tensor {name} has non-finite values", file=sys.stderr)
            return 2
        tensors.append(("param/" + name if name in param_names else "buffer/" + name, a))
    ht_torch.write_checkpoint(
        args.output, tensors,
        ints={"num_classes": num_classes, "channels": channels},
        strings={"model": args.model, "source": f"import_torch.py {args.state_dict}"
                 + (f" --channels {channels} ({stem_note})" if stem_note else ""),
                 ht_torch.NBT_KEY: ht_torch.nbt_json(nbt) if nbt else ""})
    n = sum(a.size for k, a in tensors if k.startswith("param/"))
    if stem_note:
        print(f"import_torch: {stem_note}")
    print(f"import_torch: {args.output}: model {args.model}, {num_classes} classes, {len(tensors)} tensors, "
          f"{n} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
