"""Mutated JPEG and PNG files through `hpctrain prepare --format imagefolder` (docs/testing.md#the-mutation-run):
seeded mutants of real images (bytes flipped, zeroed, inserted or cut off; JPEG frame sizes and PNG
header sizes rewritten, the PNG CRC made valid again so the size reaches the decoder) are converted
by the sanitizer build on 2 threads. Passes when the run exits 0 within its limit with no sanitizer
or crash report, and every mutant is either a stored sample or listed in skipped.tsv with a reason.
Then the loader's windowed decoder on stored bytes that `prepare` never saw: encoded shards whose
photos are mutants (written with h5py, checksums valid, so the bytes reach the decoder), trained on
for 3 steps with the random resized crop. Each trial must exit 0, or non-zero with an error naming
the shard; never a sanitizer report, a crash or a hang.
Usage: run_image_mutation.py --bin BUILD/hpctrain [--count N] [--window-trials T] [--seed S] [--work DIR]"""
import argparse
import io
import os
import random
import shutil
import struct
import subprocess
import sys
import zlib

import numpy as np
from PIL import Image

from run_mutation_env import CRASH_PATTERNS, Env


def base_images(rng):
    """name -> bytes of every kind of file the converter decodes."""
    y, x = np.mgrid[0:48, 0:64]
    rgb = np.stack([x * 4, y * 5, (x + y) * 2], -1).astype(np.uint8) + rng.integers(0, 30, (48, 64, 3)).astype(np.uint8)
    im = Image.fromarray(rgb)
    out = {}

    def save(name, img, fmt, **kw):
        b = io.BytesIO()
        img.save(b, fmt, **kw)
        out[name] = b.getvalue()

    save("baseline.jpg", im, "JPEG", quality=90)
    save("progressive.jpg", im, "JPEG", quality=80, progressive=True)
    save("gray.jpg", im.convert("L"), "JPEG")
    save("cmyk.jpg", im.convert("CMYK"), "JPEG")
    save("subsampled.jpg", im, "JPEG", subsampling=2)
    save("rgb.png", im, "PNG")
    save("palette.png", im.convert("P", palette=Image.ADAPTIVE), "PNG")
    save("alpha.png", im.convert("RGBA"), "PNG")
    save("gray.png", im.convert("L"), "PNG")
    return out


def png_chunks(b):
    pos, chunks = 8, []
    while pos + 8 <= len(b):
        n = struct.unpack(">I", b[pos:pos + 4])[0]
        chunks.append((pos, n, b[pos + 4:pos + 8]))
        pos += 12 + n
    return chunks


def mutate(data, rng):
    b = bytearray(data)
    kind = rng.choice(["flip", "zero", "insert", "truncate", "size", "size"])
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif kind == "zero":
        a = rng.randrange(len(b))
        n = min(rng.randint(1, 64), len(b) - a)
        b[a:a + n] = bytes(n)
    elif kind == "insert":
        a = rng.randrange(len(b))
        b[a:a] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
    elif kind == "truncate":
        del b[rng.randrange(1, len(b)):]
    else:  # a declared size rewritten: 0, 1, huge, or random
        v = rng.choice([0, 1, 65535, 65536, 100000, 0x7FFFFFFF, rng.randrange(1 << 16)])
        if b[:2] == b"\xff\xd8":
            i = b.find(b"\xff\xc0")
            i = i if i >= 0 else b.find(b"\xff\xc2")
            if i >= 0:
                off = i + 5 + 2 * rng.randrange(2)  # height, then width (16 bits each)
                b[off:off + 2] = struct.pack(">H", v & 0xFFFF)
        else:
            off = 16 + 4 * rng.randrange(2)  # IHDR width, height
            b[off:off + 4] = struct.pack(">I", v)
            b[29:33] = struct.pack(">I", zlib.crc32(bytes(b[12:29])) & 0xFFFFFFFF)
    return kind, bytes(b)


def write_encoded_shard(template, path, blobs, labels):
    """An encoded shard of `blobs` with the root attributes of `template` (a shard `prepare` wrote)."""
    import h5py
    with h5py.File(template, "r") as f, h5py.File(path, "w", libver="latest") as g:
        for k in f.attrs:
            g.attrs.create(k, f.attrs[k], dtype=f.attrs.get_id(k).dtype)
        data = np.frombuffer(b"".join(blobs), np.uint8)
        offsets = np.cumsum([0] + [len(b) for b in blobs]).astype(np.int64)
        g.create_dataset("encoded", data=data, chunks=(min(65536, max(1, len(data))),), fletcher32=True)
        g.create_dataset("offsets", data=offsets, fletcher32=True)
        g.create_dataset("labels", data=np.asarray(labels, np.int32), fletcher32=True)


def window_trials(args, bases, env, rng):
    """Mutated photos inside valid encoded shards through the loader's windowed decoding; returns a list of failures."""
    import h5py
    from concurrent.futures import ThreadPoolExecutor
    work = os.path.join(args.work, "window")
    src = os.path.join(work, "in")
    names = sorted(n for n in bases if n.endswith(".jpg"))  # the windowed path is JPEG's
    for i, name in enumerate(names):
        os.makedirs(os.path.join(src, f"c{i % 2}"), exist_ok=True)
        open(os.path.join(src, f"c{i % 2}", name), "wb").write(bases[name])
    enc = os.path.join(work, "enc")
    p = subprocess.run([os.path.abspath(args.bin), "prepare", "--format", "imagefolder", "--input", src, "--output", enc,
                        "--size", "24", "--storage", "encoded"], capture_output=True, text=True, env=env, timeout=300)
    if p.returncode != 0:
        return [f"prepare of the window trials' photos: exit {p.returncode}: {(p.stdout + p.stderr)[-2000:]}"]
    template = os.path.join(enc, "train-00000-of-00001.h5")
    with h5py.File(template, "r") as f:
        data, off, labels = f["encoded"][:], f["offsets"][:], f["labels"][:]
    blobs = [data[off[i]:off[i + 1]].tobytes() for i in range(len(off) - 1)]
    trials = []
    for t in range(args.window_trials):
        k = rng.randrange(len(blobs))
        kind, mutant = mutate(blobs[k], rng)
        trials.append((t, k, kind, mutant))

    def run(trial):
        t, k, kind, mutant = trial
        d = os.path.join(work, f"t{t:03d}")
        os.makedirs(d)
        shard = os.path.join(d, "train-00000-of-00001.h5")
        write_encoded_shard(template, shard, blobs[:k] + [mutant] + blobs[k + 1:], labels)
        shutil.copy(os.path.join(enc, "test-00000-of-00001.h5"), d)
        # Training with the random resized crop reads every train photo through the windowed decoder
        # (a new window each epoch); the start's vetting (which decodes every photo whole) and the
        # evaluation are off, so no whole decode refuses the shard first.
        cmd = [os.path.abspath(args.bin), "train", "--model.name", "mlp", "--train.device", "cpu",
               "--train.global_batch", str(len(blobs)), "--train.max_steps", "3", "--train.epochs", "0", "--train.eval", "false", "--verify.enabled", "false",
               "--data.crop_size", "16", "--data.random_resized_crop", "true", "--data.random_resized_crop_min_scale",
               "0.02", "--data.flip", "true", "--data.loader_threads", "2", "--data.dir", d,
               "--run.dir", os.path.join(d, "run")]
        try:
            q = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        except subprocess.TimeoutExpired:
            return f"trial {t} ({kind} of sample {k}): HANG: {' '.join(cmd)}"
        text = q.stdout + q.stderr
        crash = [c for c in CRASH_PATTERNS if c in text]
        if crash or (q.returncode != 0 and shard not in text):
            return f"trial {t} ({kind} of sample {k}): exit {q.returncode}, {crash}: {text[-1500:]}"
        shutil.rmtree(d)
        if q.returncode == 0:
            return "decoded"
        why = [l for l in text.splitlines() if "error" in l]
        return "refused: " + (why[-1] if why else text.strip().splitlines()[-1])

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(run, trials))
    refused = [r for r in results if r.startswith("refused: ")]
    print(f"image mutation: {args.window_trials} encoded shards with a mutated photo through the loader: "
          f"{results.count('decoded')} decoded, {len(refused)} refused naming the shard, e.g.")
    for r in refused[:3]:
        print("  " + r[len("refused: "):][:300])
    return [r for r in results if r != "decoded" and not r.startswith("refused: ")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--mpiexec", default="mpirun")  # accepted for symmetry with run_mutation.py
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", default="build-sanitize/image_mutation")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--window-trials", type=int, default=60)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    bases = base_images(np.random.default_rng(args.seed))
    shutil.rmtree(args.work, ignore_errors=True)
    src = os.path.join(args.work, "in")
    os.makedirs(os.path.join(src, "mutants"))
    os.makedirs(os.path.join(src, "originals"))
    for name, data in bases.items():
        open(os.path.join(src, "originals", name), "wb").write(data)
    kinds = {}
    names = sorted(bases)
    for i in range(args.count):
        name = names[i % len(names)]
        kind, data = mutate(bases[name], rng)
        fn = f"{i:04d}_{kind}_{name}"
        open(os.path.join(src, "mutants", fn), "wb").write(data)
        kinds[kind] = kinds.get(kind, 0) + 1
    env = Env(argparse.Namespace(bin=args.bin, mpiexec=args.mpiexec)).env
    out = os.path.join(args.work, "out")
    cmd = [os.path.abspath(args.bin), "prepare", "--format", "imagefolder", "--input", src, "--output", out,
           "--size", "24", "--val-fraction", "0.1", "--threads", "2"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired:
        print(f"image mutation: HANG: prepare did not finish within {args.timeout} s: {' '.join(cmd)}")
        return 1
    text = p.stdout + p.stderr
    failures = []
    if p.returncode != 0:
        failures.append(f"exit {p.returncode}")
    failures += [f"'{c}' in the output" for c in CRASH_PATTERNS if c in text]
    stored = skipped = 0
    if p.returncode == 0:
        for split in ("train", "test"):
            stored += len(open(os.path.join(out, f"samples-{split}.tsv"), encoding="utf-8").read().splitlines()) - 1
        rows = open(os.path.join(out, "skipped.tsv"), encoding="utf-8").read().splitlines()[1:]
        skipped = len(rows)
        if any(len(r.split("\t")) != 3 or not r.split("\t")[2] for r in rows):
            failures.append("a skipped file without its reason")
        if stored + skipped != args.count + len(bases):
            failures.append(f"{stored} stored + {skipped} skipped != {args.count + len(bases)} files")
        orig_skipped = [r for r in rows if "\toriginals/" in r]
        if orig_skipped:
            failures.append(f"an unmutated image was skipped: {orig_skipped}")
    print(f"image mutation: {args.count} mutants of {len(bases)} images (seed {args.seed}; {kinds}): "
          f"{stored} stored, {skipped} skipped with a reason")
    if not failures:
        failures += window_trials(args, bases, env, rng)
    if failures:
        print("image mutation: FAILED: " + "; ".join(failures))
        print(text[-4000:])
        return 1
    shutil.rmtree(args.work, ignore_errors=True)
    print("image mutation: passed (exit 0, no sanitizer report, every file stored or listed; the loader "
          "decoded or refused every mutated photo)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
