"""Groups the failures of a mutation-run summary by what went wrong (class, and the top frame in
hpctrain's own code, or hpctrain's message with numbers stripped) and prints them as Markdown: one
entry per group with its count, mutation kinds, a reproducer, the product file and the report's top.
Usage: findings.py SUMMARY.json [--label TEXT]"""
import json
import re
import sys

FRAME = re.compile(r"#\d+ 0x[0-9a-f]+ in (\S+).*?(\.\./)*((io|src|mpi)/[\w/]+\.(cpp|hpp)):(\d+)")
HDF5_FRAME = re.compile(r"#\d+ 0x[0-9a-f]+ in (H5\w+)")
UBSAN = re.compile(r"((io|src|mpi)/[\w/]+\.(cpp|hpp)):(\d+):\d+: runtime error: (.*)")


def signature(f):
    rep = f.get("report", [])
    text = "\n".join(rep)
    m = UBSAN.search(text)
    if m:
        return f"UBSan in {m.group(1)}:{m.group(4)}: {re.sub(r'[0-9]+', 'N', m.group(5))[:80]}", m.group(1)
    frames = [fr for fr in FRAME.findall(text) if "libsanitizer" not in fr[2]]
    if frames:
        h = HDF5_FRAME.findall(text)
        top = f" (HDF5: {h[0]})" if h else ""
        kind = "ASan" if "AddressSanitizer" in text else "crash"
        if "infinite loop closing library" in text:
            kind = "HDF5 identifiers leaked"
        return f"{kind} at {frames[0][0]} {frames[0][2]}:{frames[0][5]}{top}", frames[0][2]
    if "infinite loop closing library" in text:
        return "HDF5 identifiers leaked (\"infinite loop closing library\" at exit)", "?"
    if f["cls"].startswith("accepted"):
        return f"{f['kind']} accepted, {f['original'].split('_')[0]}", "?"
    msg = next((x for x in rep if "hpctrain: error" in x), "")
    msg = re.sub(r"\d+", "N", msg.split(": ", 2)[-1])[:100]
    return f"{f['cls']}: {f['kind'].split(':')[0]} {msg}", "?"


def main():
    s = json.load(open(sys.argv[1]))
    label = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--label" else ""
    groups = {}
    for f in s["failures"]:
        sig, where = signature(f)
        groups.setdefault((f["cls"], sig), []).append((f, where))
    print(f"## mutation run {label}: {s['mutants']} mutants, seed {s['seed']}, binary {s['binary']}")
    print("counts: " + ", ".join(f"{k} {v}" for k, v in s["counts"].items() if v) + "\n")
    for (cls, sig), fs in sorted(groups.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
        f, where = fs[0]
        kinds = sorted({x["kind"] for x, _ in fs})
        print(f"### {cls}: {sig}")
        print(f"- {len(fs)} mutant(s): #{', #'.join(str(x['index']) for x, _ in fs)}; kinds: {', '.join(kinds)}")
        print(f"- example #{f['index']} ({f['original']}, {f['target']}): {f['change']}")
        print(f"- reproduce: `{f['reproduce']}`")
        print(f"- file: {where}; why: {f['why']}")
        print("```")
        for line in f.get("report", [])[:14]:
            print(line[:220])
        print("```\n")


if __name__ == "__main__":
    main()
