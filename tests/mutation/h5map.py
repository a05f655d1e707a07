"""A byte map of an HDF5 file: which ranges are the superblock, object headers, B-trees, heaps and data
chunks, and whether HDF5 (or the fletcher32 filter) checks each range with a checksum.

The map drives the byte-level mutations (tests/mutation/mutants.py): a mutation is aimed at one kind of
region, and its region's protection decides how an accepted mutant that reads differently is counted
(a change in bytes no checksum covers, such as in today's shards without metadata checksums, cannot be
detected by any reader; a change in checksummed bytes must be).

Regions come from h5py (object header addresses, chunk offsets and sizes, contiguous data) and from
the 4-byte signatures of HDF5's structures in the bytes outside data. A signature structure extends to
the next region's start (an upper bound: good enough to aim a mutation at it)."""
import functools

import h5py

# Signature -> (region kind, checksummed). HDF5 file format spec 1.10: every version-2 structure
# carries a Jenkins lookup3 checksum, except fractal heap direct blocks (optional, off by default);
# version-1 structures (B-tree v1, local and global heaps, symbol table nodes) have none.
SIGNATURES = {
    b"TREE": ("btree", False), b"SNOD": ("symbol_table", False), b"HEAP": ("local_heap", False),
    b"GCOL": ("global_heap", False),
    b"OHDR": ("object_header", True), b"OCHK": ("object_header", True),
    b"BTHD": ("btree", True), b"BTIN": ("btree", True), b"BTLF": ("btree", True),
    b"FRHP": ("fractal_heap", True), b"FHIB": ("fractal_heap", True), b"FHDB": ("fractal_heap", False),
    b"FAHD": ("chunk_index", True), b"FADB": ("chunk_index", True),
    b"EAHD": ("chunk_index", True), b"EAIB": ("chunk_index", True), b"EASB": ("chunk_index", True),
    b"EADB": ("chunk_index", True), b"FSHD": ("free_space", True), b"FSSE": ("free_space", True),
    b"SMTB": ("shared_messages", True), b"SMLI": ("shared_messages", True),
}


class Region:
    __slots__ = ("kind", "start", "end", "protected", "what")

    def __init__(self, kind, start, end, protected, what=""):
        self.kind, self.start, self.end, self.protected, self.what = kind, start, end, protected, what

    def __repr__(self):
        return f"{self.kind}[{self.start}:{self.end}{' protected' if self.protected else ''} {self.what}]"


def superblock_version(data):
    """The superblock version byte (0 and 1: no checksum; 2 and 3: checksummed)."""
    return data[8] if len(data) > 8 and data[:8] == b"\x89HDF\r\n\x1a\n" else -1


@functools.lru_cache(maxsize=64)
def regions(path):
    """Every region found in the file at `path` (an original: never changes during a run), sorted by
    start. Raises OSError if h5py cannot open it."""
    with open(path, "rb") as fh:
        data = fh.read()
    size = len(data)
    sb = superblock_version(data)
    out = [Region("superblock", 0, min(size, 48 if sb >= 2 else 96), sb >= 2, f"version {sb}")]
    data_ranges = []
    headers = []
    with h5py.File(path, "r") as f:
        objs = [("/", f)]
        f.visititems(lambda n, o: objs.append((n, o)))
        seen = set()
        for name, o in objs:
            info = h5py.h5o.get_info(o.id)
            if info.addr in seen:
                continue
            seen.add(info.addr)
            v = info.hdr.version
            # Version-1 headers: 16-byte prefix then the messages; version 2: "OHDR" ... checksum.
            end = info.addr + (16 if v == 1 else 0) + info.hdr.space.total
            headers.append(Region("object_header", info.addr, min(end, size), v >= 2, name))
            if isinstance(o, h5py.Dataset):
                checked = "fletcher32" in o._filters
                layout = o.id.get_create_plist().get_layout()
                if layout == h5py.h5d.CHUNKED:
                    for k in range(o.id.get_num_chunks()):
                        ci = o.id.get_chunk_info(k)
                        data_ranges.append(Region("data", ci.byte_offset, ci.byte_offset + ci.size, checked,
                                                  f"{name} chunk {tuple(ci.chunk_offset)}"))
                elif layout == h5py.h5d.CONTIGUOUS:
                    off = o.id.get_offset()
                    if off is not None:
                        data_ranges.append(Region("data", off, off + o.id.get_storage_size(), checked, name))
    out += headers + data_ranges
    taken = sorted((r.start, r.end) for r in data_ranges)

    def inside_known(pos):  # data ranges are exact; metadata bounds are estimates
        return any(a <= pos < b for a, b in taken)

    sig_starts = []
    for sig, (kind, protected) in SIGNATURES.items():
        pos = data.find(sig)
        while pos != -1:
            if not inside_known(pos):
                if not any(r.start == pos for r in headers):
                    sig_starts.append((pos, kind, protected, sig.decode()))
            pos = data.find(sig, pos + 1)
    starts = sorted({r.start for r in out} | {p for p, *_ in sig_starts} | {size})
    for pos, kind, protected, sig in sig_starts:
        nxt = next(s for s in starts if s > pos)
        end = nxt
        if sig == "GCOL" and pos + 16 <= size:
            end = min(size, pos + int.from_bytes(data[pos + 8:pos + 16], "little"))
        elif sig == "HEAP" and pos + 32 <= size:
            # Local heap: the header names its data segment (size at +8, address at +24).
            seg_size = int.from_bytes(data[pos + 8:pos + 16], "little")
            seg_addr = int.from_bytes(data[pos + 24:pos + 32], "little")
            end = pos + 32
            if seg_addr + seg_size <= size:
                out.append(Region("local_heap", seg_addr, seg_addr + seg_size, False, "data segment"))
        out.append(Region(kind, pos, max(end, pos + 4), protected, sig))
    out.sort(key=lambda r: (r.start, r.end))
    # A metadata region ends where the next region starts (a version-1 header's space may lie in
    # a continuation block elsewhere, so addr + size overestimates it).
    for i, r in enumerate(out):
        if r.kind != "data":
            nxt = [q.start for q in out[i + 1:] if q.start > r.start]
            if nxt:
                r.end = min(r.end, nxt[0])
    # Bytes no region claims (continuation blocks of version-1 headers, free space, padding).
    gaps, pos = [], 0
    for r in out:
        if r.start > pos:
            gaps.append(Region("unlabeled", pos, r.start, False))
        pos = max(pos, r.end)
    if pos < size:
        gaps.append(Region("unlabeled", pos, size, False))
    out = sorted(out + gaps, key=lambda r: (r.start, r.end))
    return out


def by_kind(path):
    """kind -> list of regions (for a mutation aimed at one kind)."""
    m = {}
    for r in regions(path):
        if r.end > r.start:
            m.setdefault(r.kind, []).append(r)
    return m


def protected_at(path, start, end):
    """Whether every byte of [start, end) lies in a checksummed region of the original file `path`
    (the innermost region containing it, data chunks and headers before the signature scan's bounds)."""
    rs = regions(path)
    for pos in range(start, end):
        cover = [r for r in rs if r.start <= pos < r.end]
        if not cover:
            return False
        # The narrowest region is the real owner (a signature region's bound may overlap others).
        owner = min(cover, key=lambda r: r.end - r.start)
        if not owner.protected:
            return False
    return True


if __name__ == "__main__":
    import sys
    for r in regions(sys.argv[1]):
        print(r)
