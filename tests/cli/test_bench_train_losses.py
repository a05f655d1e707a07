#!/usr/bin/env python3
"""`hpctrain bench train` records the first and last loss and says whether they hold their bound
(every loss finite, the last no higher than 1.5 x the first), so a fast but wrong run is not taken for
a result (scripts/device_check.sh marks it not verified).
1. A normal run: both losses finite, losses_ok true, the bound stated in the JSON.
2. A run that diverges (learning rate 5: the loss grows to about 1e22 in six steps): losses_ok false, a warning on stderr, exit 0 (it is
   still a measurement; the verdict is the reader's).
"""
import json
import math
import os
import subprocess
import sys
import tempfile

HT = os.environ.get("HT_BIN", "hpctrain")


def bench(tmp, name, *extra):
    out = os.path.join(tmp, name + ".json")
    cmd = [HT, "bench", "train", "--warmup", "2", "--steps", "4", "--out", out, "--model.name", "mlp",
           "--train.global_batch", "32", "--train.device", "cpu", "--run.dir", os.path.join(tmp, name), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return json.load(open(out)), p.stderr


with tempfile.TemporaryDirectory() as tmp:
    r, err = bench(tmp, "normal")
    for k in ("first_loss", "last_loss"):
        assert isinstance(r.get(k), float) and math.isfinite(r[k]), (k, r.get(k))
    assert r["losses_ok"] is True, r
    assert r["loss_bound"] == "every loss finite and last_loss <= 1.5 x first_loss", r["loss_bound"]
    assert r["last_loss"] <= 1.5 * r["first_loss"], r
    assert "not verified" not in err, err

    r, err = bench(tmp, "diverging", "--optim.lr", "5")
    assert r["losses_ok"] is False, r
    assert r["last_loss"] is None or r["last_loss"] > 1.5 * r["first_loss"], r
    assert "fail their bound" in err and "not verified" in err, err
print("bench train: losses recorded and held to their bound; a diverging run is marked not verified")
