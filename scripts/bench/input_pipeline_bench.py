#!/usr/bin/python3
"""The training input pipeline side by side, one core each, in one run: images/s delivered to the step
with RandomResizedCrop(224), horizontal flip and normalisation (float32, NCHW), per core.
  hpctrain_raw      DataLoader over the raw 256-pixel shards of `prepare --format imagefolder`
                    (`hpctrain bench io --crop-size 224 --loader-threads 1`, its loader_resized_crop pass)
  hpctrain_encoded  the same over `--storage encoded` shards (the random resized crop drawn over each
                    whole photo, as torchvision's, and only that window decoded)
  torch_jpeg        torch.utils.data.DataLoader(ImageFolder(JPEG files), RandomResizedCrop(224),
                    RandomHorizontalFlip, ToTensor, Normalize), num_workers=0 (this process, one thread)
  torch_hdf5_raw    the same transforms over the same raw HDF5 shards (h5py reads, PIL images)
  torch_hdf5_encoded  the same over the encoded shards (h5py reads the bytes, PIL decodes them)
The goal (issue 26): hpctrain at least 2x PyTorch's images/s per core for each storage choice, i.e.
hpctrain_raw against torch_hdf5_raw and hpctrain_encoded against torch_jpeg and torch_hdf5_encoded.
Writes JSON with the machine, the command and the ratios (hpctrain / torch) per repeat.
Usage: scripts/bench/input_pipeline_bench.py [--bin build/hpctrain] [--files 512] [--repeats 2]
       [--out results/cpu/input_pipeline.json]"""
import glob
import io
import json
import os
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prepare_bench import bench_args, photos, write_results  # noqa: E402


def torch_pass(dataset, batch):
    import torch
    dl = torch.utils.data.DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=0, drop_last=True)
    t0, c0, n = time.perf_counter(), time.process_time(), 0
    for x, _ in dl:
        n += x.shape[0]
    return n / (time.perf_counter() - t0), n / (time.process_time() - c0)


class H5Shards:
    """The hpctrain shards (raw or encoded) as a map-style torch Dataset returning PIL images through `tf`."""

    def __init__(self, root, tf):
        from PIL import Image
        self.Image = Image
        self.files = [h5py.File(p, "r") for p in sorted(glob.glob(os.path.join(root, "train-*.h5")))]
        self.index = [(f, i) for f in self.files for i in range(f["labels"].shape[0])]
        self.offsets = {f.filename: f["offsets"][:] for f in self.files if "offsets" in f}
        self.tf = tf

    def __len__(self):
        return len(self.index)

    def __getitem__(self, k):
        f, i = self.index[k]
        if f.filename in self.offsets:
            o = self.offsets[f.filename]
            im = self.Image.open(io.BytesIO(f["encoded"][o[i]:o[i + 1]].tobytes())).convert("RGB")
        else:
            im = self.Image.fromarray(f["images"][i])
        return self.tf(im), int(f["labels"][i])


def main():
    a = bench_args("results/cpu/input_pipeline.json", files=512, batch=64, repeats=2)
    os.environ["OMP_NUM_THREADS"] = "1"
    os.sched_setaffinity(0, {0})  # PyTorch on the core hpctrain runs on (taskset -c 0): the same core for all
    import torch
    from torchvision import datasets, transforms
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "photos")
        photos(src, a.files, 500, 375, 2)  # ImageNet's typical photo
        data = {k: os.path.join(tmp, k) for k in ("raw", "encoded")}
        for k, d in data.items():
            subprocess.run([a.bin, "prepare", "--format", "imagefolder", "--input", src, "--output", d, "--size", "256",
                            "--val-fraction", "0.1", "--storage", k], check=True, capture_output=True)
        norm = transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
        tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                                 transforms.ToTensor(), norm])
        rows = []
        for r in range(a.repeats):  # alternating, so all of them see the same machine
            row = {}
            for k, d in data.items():
                out = os.path.join(tmp, f"io{r}_{k}.json")
                subprocess.run(["taskset", "-c", "0", a.bin, "bench", "io", "--data", d, "--batch", str(a.batch),
                                "--reps", "1", "--crop-size", "224", "--loader-threads", "1", "--out", out],
                               check=True, capture_output=True)
                m = json.load(open(out))["runs"][0]["loader_resized_crop"]
                row["hpctrain_" + k] = (m["images_per_s"], m["images_per_cpu_s"])
            row["torch_jpeg"] = torch_pass(datasets.ImageFolder(src, transform=tf), a.batch)
            for k, d in data.items():
                row["torch_hdf5_" + k] = torch_pass(H5Shards(d, tf), a.batch)
            rows.append(row)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
    best = {k: max(r[k][0] for r in rows) for k in rows[0]}
    res = {
        "what": "images/s delivered to the step (RandomResizedCrop 224, flip, normalise, float32 NCHW), "
                "one core each; [wall images/s, images per CPU-second] per repeat",
        "machine": {"cpu": cpu, "cores": os.cpu_count()},
        "command": f"scripts/bench/input_pipeline_bench.py --bin {a.bin} --files {a.files} --batch {a.batch} "
                   f"--repeats {a.repeats}",
        "photos": f"{a.files} JPEG files of 500 x 375 (quality 90), shards at 256 pixels (raw and encoded)",
        "repeats": rows,
        "best_images_per_s": best,
        "ratio_raw_vs_torch_hdf5_raw": best["hpctrain_raw"] / best["torch_hdf5_raw"],
        "ratio_raw_vs_torch_jpeg": best["hpctrain_raw"] / best["torch_jpeg"],
        "ratio_encoded_vs_torch_jpeg": best["hpctrain_encoded"] / best["torch_jpeg"],
        "ratio_encoded_vs_torch_hdf5_encoded": best["hpctrain_encoded"] / best["torch_hdf5_encoded"],
    }
    write_results(res, a.out)


if __name__ == "__main__":
    main()
