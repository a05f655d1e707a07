"""Mutated JPEG and PNG files through `hpctrain prepare --format imagefolder` (docs/testing.md#the-mutation-run):
seeded mutants of real images (bytes flipped, zeroed, inserted or cut off; JPEG frame sizes and PNG
header sizes rewritten, the PNG CRC made valid again so the size reaches the decoder) are converted
by the sanitizer build on 2 threads. Passes when the run exits 0 within its limit with no sanitizer
or crash report, and every mutant is either a stored sample or listed in skipped.tsv with a reason.
Usage: run_image_mutation.py --bin BUILD/hpctrain [--count N] [--seed S] [--work DIR]"""
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--mpiexec", default="mpirun")  # accepted for symmetry with run_mutation.py
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", default="build-sanitize/image_mutation")
    ap.add_argument("--timeout", type=int, default=600)
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
    if failures:
        print("image mutation: FAILED: " + "; ".join(failures))
        print(text[-4000:])
        return 1
    shutil.rmtree(args.work, ignore_errors=True)
    print("image mutation: passed (exit 0, no sanitizer report, every file stored or listed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
