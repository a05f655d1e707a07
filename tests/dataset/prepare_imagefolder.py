"""`hpctrain prepare --format imagefolder` on a generated image folder (Debian's python3-pil makes the
images): labels equal torchvision's ImageFolder; stored pixels equal PIL's (decode, draft where
hpctrain uses DCT scaling, convert, torchvision's Resize + CenterCrop) exactly; bad files are skipped
and listed, or exit 2 with --strict; a huge declared size is refused; 2 ranks write the same dataset
as 1; a prepare stopped part-way resumes and ends with the same dataset; the shards are read back by
`hpctrain inspect`."""
import io
import json
import math
import os
import shutil
import struct
import tempfile
import zlib

import h5py
import numpy as np
from PIL import Image

from common import check, finish, run

rng = np.random.default_rng(7)
S = 48  # stored side: small, so the test is quick; large images still take the DCT-scaled path


def photo(w, h):
    """A smooth image with detail (gradients plus noise), so resampling errors would show."""
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 255 // max(1, w - 1)), (y * 255 // max(1, h - 1)), ((x + y) * 127 // max(1, w + h))], -1)
    noise = rng.integers(0, 40, (h, w, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def make_folder(root):
    """DIR/train and DIR/val with three classes (one of them non-ASCII) and every kind of file."""
    cases = []
    for split in ("train", "val"):
        for ci, cls in enumerate(("cat", "dog", "émeu")):
            d = os.path.join(root, split, cls)
            os.makedirs(os.path.join(d, "nested"), exist_ok=True)
            k = 0

            def save(im, name, **kw):
                nonlocal k
                path = os.path.join(d, name)
                im.save(path, **kw)
                cases.append(path)
                k += 1

            save(Image.fromarray(photo(20, 20)), "a_small.jpg", quality=90)
            save(Image.fromarray(photo(2000, 1500)), "b_large.jpg", quality=85)  # DCT-scaled path
            save(Image.fromarray(photo(301, 199)), "c_progressive.JPEG", quality=80, progressive=True)
            save(Image.fromarray(photo(97, 131)), "d_rgb.png")
            save(Image.fromarray(photo(64, 40)).convert("L"), "e_gray.jpg")
            save(Image.fromarray(photo(90, 70)).convert("CMYK"), "f_cmyk.jpg", quality=90)
            save(Image.fromarray(photo(80, 60)).convert("P", palette=Image.ADAPTIVE), "g_palette.png")
            save(Image.fromarray(photo(70, 90)).convert("RGBA"), "h_alpha.PNG")
            rgb16 = photo(50, 40).astype(np.uint16) * 257 + rng.integers(0, 200, (40, 50, 3)).astype(np.uint16)
            path = os.path.join(d, "i_rgb16.png")
            write_png16(path, rgb16)
            cases.append(path)
            save(Image.fromarray(photo(66, 66)), "nested/j_nested.jpg")
            save(Image.fromarray(photo(33, 77)), "k_ünïcode.jpg")
            with open(os.path.join(d, "README.txt"), "w") as f:  # stray non-image: not a sample
                f.write("notes\n")
            os.symlink(os.path.join(d, "d_rgb.png"), os.path.join(d, "l_link.png"))
    return cases


def write_png16(path, rgb16):
    """A 16-bit RGB PNG (PIL cannot write one)."""
    h, w, _ = rgb16.shape
    raw = b"".join(b"\0" + rgb16[y].astype(">u2").tobytes() for y in range(h))

    def chunk(t, data):
        return struct.pack(">I", len(data)) + t + data + struct.pack(">I", zlib.crc32(t + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def huge_png(path):
    """A PNG whose header claims 100000 x 100000 pixels (valid CRC; no pixel data to speak of)."""
    def chunk(t, data):
        return struct.pack(">I", len(data)) + t + data + struct.pack(">I", zlib.crc32(t + data) & 0xFFFFFFFF)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(b"\0" * 100)) + chunk(b"IEND", b""))


def reference(path, mode="RGB"):
    """What the stored pixels should be: PIL decode (draft as hpctrain's DCT scaling), convert to
    RGB (or L), then torchvision's Resize(S) and CenterCrop(S) arithmetic on PIL images."""
    im = Image.open(path)
    if im.format == "JPEG":
        im.draft("RGB", (2 * S, 2 * S))
    im = im.convert("RGB").convert(mode) if mode == "L" and im.mode in ("P", "RGBA", "CMYK") else im.convert(mode)
    w, h = im.size
    short, long_ = (w, h) if w <= h else (h, w)
    new_long = int(S * long_ / short)
    nw, nh = (S, new_long) if w <= h else (new_long, S)
    im = im.resize((nw, nh), Image.BILINEAR)
    left, top = int(round((nw - S) / 2.0)), int(round((nh - S) / 2.0))
    return np.asarray(im.crop((left, top, left + S, top + S)))


def read_dataset(out):
    """Every split's images, labels and attributes, shard by shard in order."""
    res = {}
    for split in ("train", "test"):
        names = sorted(n for n in os.listdir(out) if n.startswith(split + "-") and n.endswith(".h5"))
        imgs, labs, attrs = [], [], []
        for n in names:
            with h5py.File(os.path.join(out, n), "r") as f:
                imgs.append(f["images"][:])
                labs.append(f["labels"][:])
                attrs.append({k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in f.attrs.items()})
        res[split] = (np.concatenate(imgs), np.concatenate(labs), attrs, names)
    return res


def samples_tsv(out, split):
    with open(os.path.join(out, f"samples-{split}.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    return [(r[2], int(r[1])) for r in rows]


def same_dataset(a, b, what):
    for split in ("train", "test"):
        ia, la, aa, na = a[split]
        ib, lb, ab, nb = b[split]
        check(na == nb, f"{what}: {split} shard files {na} vs {nb}")
        check(np.array_equal(la, lb), f"{what}: {split} labels differ")
        check(ia.shape == ib.shape and np.array_equal(ia, ib), f"{what}: {split} images differ")
        check(aa == ab, f"{what}: {split} attributes differ:\n{aa}\n{bb if False else ab}")


with tempfile.TemporaryDirectory() as tmp:
    root = os.path.join(tmp, "photos")
    make_folder(root)
    # In the last class: the shards before it convert first, so a --strict stop leaves some for a resume.
    cat = os.path.join(root, "train", "émeu")
    open(os.path.join(cat, "m_text.jpg"), "w").write("this is not a JPEG\n")
    open(os.path.join(cat, "n_empty.jpg"), "wb").close()
    good = open(os.path.join(cat, "b_large.jpg"), "rb").read()
    open(os.path.join(cat, "o_truncated.jpg"), "wb").write(good[: len(good) // 2])
    huge_png(os.path.join(cat, "p_huge.png"))
    bad = {"train/émeu/m_text.jpg", "train/émeu/n_empty.jpg", "train/émeu/o_truncated.jpg", "train/émeu/p_huge.png"}

    # 1. One rank.
    out1 = os.path.join(tmp, "out1")
    rc, so, se = run(["prepare", "--format", "imagefolder", "--input", root, "--output", out1, "--size", str(S),
                      "--shards", "3", "--test-shards", "2"], timeout=300)
    check(rc == 0, f"prepare exit {rc}\n{so}\n{se}")
    check("4 files skipped" in se and "skipped.tsv" in se, f"skipped count on the console: {se}")
    with open(os.path.join(out1, "skipped.tsv"), encoding="utf-8") as f:
        skipped = {r.split("\t")[1]: r.split("\t")[2].strip() for r in list(f)[1:]}
    check(set(skipped) == bad, f"skipped files {sorted(skipped)} != {sorted(bad)}")
    check("100000 x 100000" in skipped.get("train/émeu/p_huge.png", ""), f"huge PNG reason: {skipped}")
    check("empty" in skipped.get("train/émeu/n_empty.jpg", ""), f"empty file reason: {skipped}")
    check("not a JPEG or PNG" in skipped.get("train/émeu/m_text.jpg", ""), f"text file reason: {skipped}")
    check("JPEG" in skipped.get("train/émeu/o_truncated.jpg", ""), f"truncated JPEG reason: {skipped}")
    manifest = json.load(open(os.path.join(out1, "manifest.json")))
    check(manifest["classes"] == ["cat", "dog", "émeu"], f"classes {manifest['classes']}")
    check(open(os.path.join(out1, "classes.txt"), encoding="utf-8").read() == "0\tcat\n1\tdog\n2\témeu\n", "classes.txt")
    d1 = read_dataset(out1)

    # Labels and order: torchvision's ImageFolder on the same folders, the skipped files left out.
    try:
        from torchvision.datasets import ImageFolder
        for split, sub in (("train", "train"), ("test", "val")):
            tv = ImageFolder(os.path.join(root, sub))
            want = [(os.path.relpath(p, root), lab) for p, lab in tv.samples if os.path.relpath(p, root) not in bad]
            got = samples_tsv(out1, split)
            check(got == want, f"{split}: samples differ from ImageFolder's:\n{got[:5]}\n{want[:5]}")
            check(tv.classes == manifest["classes"], f"{split}: classes {tv.classes}")
            check(list(d1[split][1]) == [lab for _, lab in want], f"{split}: shard labels differ from ImageFolder's")
    except ImportError:
        print("torchvision not importable: the ImageFolder comparison is not run")
        check(False, "torchvision is a test dependency (scripts/install_deps.sh)")

    # Pixels: every stored sample against the PIL reference.
    worst = 0
    for split in ("train", "test"):
        imgs = d1[split][0]
        for i, (rel, _) in enumerate(samples_tsv(out1, split)):
            ref = reference(os.path.join(root, rel)).astype(int)
            diff = np.abs(imgs[i].astype(int) - ref).max()
            worst = max(worst, diff)
            check(diff == 0, f"{split} sample {i} ({rel}): pixels differ from PIL's by up to {diff}")
    print(f"pixels: worst difference from the PIL reference {worst} over "
          f"{len(d1['train'][1]) + len(d1['test'][1])} samples")
    # Gray (--channels 1): PIL's "L" conversion, the same resize.
    outg = os.path.join(tmp, "outg")
    rc, so, se = run(["prepare", "--format", "imagefolder", "--input", root, "--output", outg, "--size", str(S),
                      "--channels", "1"], timeout=300)
    check(rc == 0, f"--channels 1 exit {rc}: {se}")
    dg = read_dataset(outg)
    check(dg["train"][0].shape[1:] == (S, S, 1), f"--channels 1 shape {dg['train'][0].shape}")
    worst_g = 0
    for i, (rel, _) in enumerate(samples_tsv(outg, "train")):
        ref = reference(os.path.join(root, rel), "L").astype(int)
        worst_g = max(worst_g, int(np.abs(dg["train"][0][i, :, :, 0].astype(int) - ref).max()))
    check(worst_g == 0, f"--channels 1: pixels differ from PIL's L conversion by up to {worst_g}")
    a = d1["train"][2][0]
    tr = d1["train"][0].reshape(-1, 3) / 255.0
    check(np.allclose(a["mean"], tr.mean(0), atol=1e-5) and np.allclose(a["std"], tr.std(0), atol=1e-5),
          f"mean/std {a['mean']} {a['std']} vs {tr.mean(0)} {tr.std(0)}")
    check(all(x["mean"] == a["mean"] for s in ("train", "test") for x in d1[s][2]), "mean/std differ between shards")
    rc, so, se = run(["inspect", out1])
    check(rc == 0 and "valid" in so and "48x48x3" in so, f"inspect exit {rc}: {so} {se}")

    # 1b. Encoded storage: each sample is its file's bytes; decoded by the loader to the raw pixels
    # exactly, so the statistics and a training run on it (centre crop, flip) are bitwise those of raw
    # storage. A random resized crop of an encoded sample is drawn over the whole photo instead
    # (tests/unit/test_image_window.cpp compares those pixels with PIL's); here it must train.
    oute = os.path.join(tmp, "oute")
    rc, so, se = run(["prepare", "--format", "imagefolder", "--input", root, "--output", oute, "--size", str(S),
                      "--shards", "3", "--test-shards", "2", "--storage", "encoded"], timeout=300)
    check(rc == 0, f"--storage encoded exit {rc}: {se}")
    blobs = []
    for k in range(3):
        with h5py.File(os.path.join(oute, f"train-{k:05d}-of-00003.h5"), "r") as f:
            check(f.attrs["storage"] == b"encoded" and "images" not in f, f"encoded shard {k}: layout {list(f)}")
            enc, off = f["encoded"][:], f["offsets"][:]
            blobs += [enc[off[i]:off[i + 1]].tobytes() for i in range(len(off) - 1)]
            check(list(f.attrs["mean"]) == list(d1["train"][2][0]["mean"]), f"encoded shard {k}: mean/std differ from raw")
    rels = [r for r, _ in samples_tsv(oute, "train")]
    check(len(blobs) == len(rels) and all(b == open(os.path.join(root, r), "rb").read() for b, r in zip(blobs, rels)),
          "encoded samples are the original files' bytes")
    rc, so, se = run(["inspect", "--validate", oute])
    check(rc == 0 and "valid" in so, f"inspect --validate of encoded shards: {rc} {so} {se}")
    train = ["train", "--model.name", "mlp", "--train.global_batch", "8", "--train.max_steps", "3", "--train.device",
             "cpu", "--train.epochs", "0", "--data.flip", "true", "--data.crop_size", "40",
             "--data.loader_threads", "2", "--train.log_every_steps", "1"]
    rrc = ["--data.random_resized_crop", "true"]
    losses = {}
    for name, d, extra in (("raw", out1, []), ("encoded", oute, []), ("encoded_rrc", oute, rrc)):
        rd = os.path.join(tmp, "run_" + name)
        rc, so, se = run(train + extra + ["--data.dir", d, "--run.dir", rd], timeout=300)
        check(rc == 0, f"training on {name} shards exit {rc}: {se[-500:]}")
        losses[name] = [(j["step"], j["loss"]) for j in map(json.loads, open(os.path.join(rd, "metrics.jsonl")))
                        if j.get("event") == "step"]
    check(losses["raw"] and losses["raw"] == losses["encoded"],
          f"losses on encoded shards bitwise those on raw shards: {losses}")
    check(len(losses["encoded_rrc"]) == 3 and all(math.isfinite(l) for _, l in losses["encoded_rrc"])
          and losses["encoded_rrc"] != losses["encoded"], f"random resized crop on encoded shards: {losses}")
    # --max-side: larger files stored re-encoded at that side (JPEG), smaller ones as they are.
    outm = os.path.join(tmp, "outm")
    rc, so, se = run(["prepare", "--format", "imagefolder", "--input", root, "--output", outm, "--size", str(S),
                      "--storage", "encoded", "--max-side", "64"], timeout=300)
    check(rc == 0, f"--max-side exit {rc}: {se}")
    with h5py.File(os.path.join(outm, "train-00000-of-00001.h5"), "r") as f:
        enc, off = f["encoded"][:], f["offsets"][:]
    sizes = {r: Image.open(io.BytesIO(enc[off[i]:off[i + 1]].tobytes())).size
             for i, (r, _) in enumerate(samples_tsv(outm, "train"))}
    check(sizes["train/cat/b_large.jpg"] == (64, 48) and sizes["train/cat/a_small.jpg"] == (20, 20),
          f"--max-side 64: {sizes['train/cat/b_large.jpg']}, {sizes['train/cat/a_small.jpg']}")
    # A shard whose /offsets point outside /encoded: refused before any read, naming the dataset.
    bad_enc = os.path.join(tmp, "bad_enc")
    shutil.copytree(oute, bad_enc)
    with h5py.File(os.path.join(bad_enc, "train-00001-of-00003.h5"), "r+") as f:
        o = f["offsets"][:]
        o[2] = 1 << 40
        f["offsets"][:] = o
    rc, so, se = run(["inspect", "--validate", bad_enc])
    check(rc == 2 and "/offsets" in so + se, f"bad /offsets: exit {rc}: {so} {se}")

    # 2. Two ranks: the same dataset, byte for byte in every array and attribute.
    out2 = os.path.join(tmp, "out2")
    rc, so, se = run(["prepare", "--format", "imagefolder", "--input", root, "--output", out2, "--size", str(S),
                      "--shards", "3", "--test-shards", "2", "--threads", "1"], np_ranks=2, timeout=300)
    check(rc == 0, f"prepare on 2 ranks exit {rc}\n{so}\n{se}")
    same_dataset(d1, read_dataset(out2), "2 ranks vs 1")
    for n in ("samples-train.tsv", "samples-test.tsv", "skipped.tsv", "classes.txt"):
        check(open(os.path.join(out1, n), "rb").read() == open(os.path.join(out2, n), "rb").read(), f"{n} differs (2 ranks)")
    rc, so, se = run(["prepare", "--format", "imagefolder", "--input", root, "--output", out2, "--size", str(S),
                      "--shards", "3", "--test-shards", "2"], timeout=120)
    check(rc == 0 and "nothing to do" in so, f"rerun of a finished prepare: {rc} {so} {se}")

    # 3. --strict: exit 2 naming a bad file, on every rank; the converted shards stay for a resume.
    out3 = os.path.join(tmp, "out3")
    rc, so, se = run(["prepare", "--format", "imagefolder", "--input", root, "--output", out3, "--size", str(S),
                      "--shards", "3", "--test-shards", "2", "--strict"], np_ranks=2, timeout=300)
    check(rc == 2, f"--strict exit {rc}, expected 2\n{se}")
    check("train/émeu/" in se and "--strict" in se, f"--strict message names the file: {se}")
    check(not os.path.exists(os.path.join(out3, "manifest.json")), "--strict failure left a manifest")
    staged = [n for n in os.listdir(os.path.join(out3, ".prepare")) if n.endswith(".json")]
    check(len(staged) >= 1, f"shards converted before the failure were not kept: {staged}")
    # Resume without --strict (the same files, so the same plan): the converted shards are kept, the
    # rest converted, and the result is byte for byte that of the uninterrupted run.
    rc, so, se = run(["prepare", "--format", "imagefolder", "--input", root, "--output", out3, "--size", str(S),
                      "--shards", "3", "--test-shards", "2"], np_ranks=2, timeout=300)
    check(rc == 0 and "resumed from an earlier run" in so, f"resume exit {rc}: {so} {se}")
    same_dataset(d1, read_dataset(out3), "resumed vs uninterrupted")
    check(not os.path.exists(os.path.join(out3, ".prepare")), "the staging folder was left behind")
    moved = os.path.join(tmp, "moved")
    os.makedirs(moved)
    for b in bad:
        shutil.move(os.path.join(root, b), moved)
    out4 = os.path.join(tmp, "out4")

    # 4. Bad usage: an empty class folder, a missing val/, --val-fraction with train/.
    os.makedirs(os.path.join(root, "val", "zebra"))
    os.makedirs(os.path.join(root, "train", "zebra"))
    rc, so, se = run(["prepare", "--format", "imagefolder", "--input", root, "--output", out4], np_ranks=2)
    check(rc == 2 and "zebra" in se and "no image files" in se, f"empty class folder: exit {rc}: {se}")
    rc, so, se = run(["prepare", "--format", "imagefolder", "--input", os.path.join(root, "train"), "--output", out4,
                      "--val-fraction", "1.5"])
    check(rc == 2 and "--val-fraction" in se, f"bad --val-fraction: exit {rc}: {se}")

    # 5. --val-fraction: a seeded split of a single folder; every file lands in exactly one split.
    shutil.rmtree(os.path.join(root, "train", "zebra"))
    out5 = os.path.join(tmp, "out5")
    rc, so, se = run(["prepare", "--format", "imagefolder", "--input", os.path.join(root, "train"), "--output", out5,
                      "--size", "16", "--val-fraction", "0.25", "--seed", "3"])
    check(rc == 0, f"--val-fraction exit {rc}: {se}")
    tr, te = samples_tsv(out5, "train"), samples_tsv(out5, "test")
    check(len(te) == 9 and len(tr) == 27 and not set(tr) & set(te), f"split sizes {len(tr)}/{len(te)}")

finish()
