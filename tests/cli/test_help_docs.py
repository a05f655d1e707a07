"""`hpctrain train --help` and docs/config.md describe the same keys: each key's type, default and
accepted interval (numeric keys) printed by --help, from the key list that parses and validates
(src/train/config.cpp), appear in its row of docs/config.md, and the docs have no row for a key that
does not exist. Also: --help names --init-from and --reset-head."""
import os
import re
import subprocess
import sys

HT = os.environ.get("HT_BIN", "build/hpctrain")
DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "config.md")

out = subprocess.run([HT, "train", "--help"], capture_output=True, text=True, timeout=60)
problems = []
if out.returncode != 0:
    problems.append(f"hpctrain train --help exit {out.returncode}")
helped = {}
for line in out.stdout.splitlines():
    m = re.match(r"  --([a-z_]+\.[a-z_.]+)\s+(int|float|bool|string)\s+= (\S+)\s+(.*)$", line)
    if m:
        rng = re.search(r" \(in ([\[(][^\])]*[\])])\)$", m.group(4))
        helped[m.group(1)] = (m.group(2), "" if m.group(3) == '""' else m.group(3), rng.group(1) if rng else None)
for flag in ("--init-from", "--reset-head", "--config"):
    if flag not in out.stdout:
        problems.append(f"--help does not name {flag}")
if len(helped) < 60:
    problems.append(f"--help lists only {len(helped)} keys")

rows = {}
for line in open(DOCS).read().splitlines():
    m = re.match(r"\| `([a-z_]+\.[a-z_.]+)` \| ([^|]*) \| ([^|]*) \| (.*) \| ?([^|]*?) ?\|$", line)
    if m:
        rows[m.group(1)] = (m.group(2).strip(), m.group(3).strip(), m.group(5).strip())
for key, (typ, default, rng) in helped.items():
    if key not in rows:
        problems.append(f"docs/config.md has no row for {key}")
        continue
    dtyp, ddefault, dval = rows[key]
    want_default = f"`{default}`" if default else "(empty)"
    if dtyp != typ:
        problems.append(f"{key}: type {dtyp!r} in the docs, {typ!r} in --help")
    if ddefault != want_default:
        problems.append(f"{key}: default {ddefault!r} in the docs, {want_default!r} in --help")
    if rng and f"in `{rng}`" not in dval:
        problems.append(f"{key}: the docs' validation column {dval!r} lacks the range in `{rng}`")
for key in rows:
    if key not in helped:
        problems.append(f"docs/config.md documents {key}, which --help does not list")

for p in problems:
    print("FAIL:", p)
print(f"{len(helped)} keys compared, {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
