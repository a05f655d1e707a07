#!/usr/bin/python3
"""Conversion speed of `hpctrain prepare --format imagefolder` against PIL + torchvision doing the same
work (decode, convert to RGB, Resize(S), CenterCrop(S), the pixels in memory) on the same JPEG files,
one core each, alternating in one run (docs/dataset.md#your-own-images). Writes JSON.
Usage: scripts/bench/prepare_bench.py --bin build/hpctrain [--files 400] [--width 500 --height 375]
       [--size 256] [--repeats 3] [--out results/cpu/prepare_imagefolder.json]
The default photo size is ImageNet's typical 500 x 375."""
import argparse
import json
import os
import platform
import subprocess
import tempfile
import time

import numpy as np
from PIL import Image


def bench_args(out, **counts):
    """A bench script's command line: --bin, the whole-number options `counts` (name=default, in order), --out."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/hpctrain")
    for name, default in counts.items():
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--out", default=out)
    return ap.parse_args()


def write_results(res, path):
    """Writes the bench results as indented JSON to `path` (making its folder) and prints them."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")
    print(json.dumps(res, indent=2))


def photos(root, n, w, h, seed):
    """n JPEG files (quality 90) with photo-like content, in 4 class folders."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    for i in range(n):
        d = os.path.join(root, f"class{i % 4}")
        os.makedirs(d, exist_ok=True)
        f = rng.uniform(0.01, 0.05, 3)
        img = np.stack([127 + 100 * np.sin(x * f[0] + y * f[1] + i), 127 + 100 * np.cos(y * f[2] + i),
                        (x + y + i) % 256], -1) + rng.normal(0, 12, (h, w, 3))
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(os.path.join(d, f"{i:05d}.jpg"), quality=90)


def pil_convert(root, size):
    """torchvision's eval transform on PIL images, file by file, on this thread."""
    from torchvision import transforms
    tf = transforms.Compose([transforms.Resize(size), transforms.CenterCrop(size)])
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs)
    out = np.empty((len(files), size, size, 3), np.uint8)
    t0 = time.perf_counter()
    for i, p in enumerate(files):
        with open(p, "rb") as fh:
            out[i] = np.asarray(tf(Image.open(fh).convert("RGB")))
    return time.perf_counter() - t0, len(files)


def main():
    a = bench_args("results/cpu/prepare_imagefolder.json", files=400, width=500, height=375, size=256, repeats=3)
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "photos")
        photos(src, a.files, a.width, a.height, 1)
        ours, theirs = [], []
        for r in range(a.repeats):  # alternating, so both see the same machine
            out = os.path.join(tmp, f"out{r}")
            t0 = time.perf_counter()
            subprocess.run([a.bin, "prepare", "--format", "imagefolder", "--input", src, "--output", out, "--size",
                            str(a.size), "--threads", "1", "--val-fraction", "0.1"], check=True, capture_output=True)
            ours.append(a.files / (time.perf_counter() - t0))
            secs, n = pil_convert(src, a.size)
            theirs.append(n / secs)
    cpu = ""
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    res = {
        "what": "images/s on one core: read, decode (JPEG), RGB, shorter side to size, centre crop; "
                "hpctrain also writes the HDF5 shards (whole command, process start included)",
        "machine": {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version()},
        "command": f"scripts/bench/prepare_bench.py --bin {a.bin} --files {a.files} --width {a.width} "
                   f"--height {a.height} --size {a.size} --repeats {a.repeats}",
        "files": a.files, "photo": [a.width, a.height], "size": a.size,
        "hpctrain_images_per_s": ours, "pil_torchvision_images_per_s": theirs,
        "ratio_best": max(ours) / max(theirs),
        "ratio_per_repeat": [o / t for o, t in zip(ours, theirs)],
    }
    write_results(res, a.out)


if __name__ == "__main__":
    main()
