#!/usr/bin/env python3
"""Regenerates sim/src/proc_address_table.inc (the cuGetProcAddress table).

For every entry point the sim defines in sim/src/api_*.cc and proc_address.cc, the toolkit's
cudaTypedefs.h names the CUDA version that introduced each flavour (PFN_<name>_v<version>, with a
_ptds/_ptsz suffix for per-thread default-stream flavours). The n-th version of a base name is
exported as <name>, <name>_v2, <name>_v3, ...; per-thread flavours attach to the newest names.

usage: gen_proc_address_table.py [CUDA_INCLUDE_DIR]   (default /usr/local/cuda/include)
"""
import collections
import pathlib
import re
import sys

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"


def defined_symbols():
    text = "".join(p.read_text() for p in sorted(SRC.glob("api_*.cc")))
    text += (SRC / "proc_address.cc").read_text()
    syms = set(re.findall(r"CUresult CUDAAPI (cu\w+)\(", text))
    for a, b in re.findall(r"MEMSIM_BOTH_FLAVOURS\(\s*(cu\w+),\s*(cu\w+)", text):
        syms.update((a, b))
    syms.update(re.findall(r"MEMSIM_NOT_SUPPORTED\((cu\w+)", text))
    return syms


def main():
    include = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/local/cuda/include")
    typedefs = "".join((include / h).read_text()
                       for h in ("cudaTypedefs.h", "cudaProfilerTypedefs.h"))
    versions = collections.defaultdict(set)
    for name, ver, suffix in re.findall(r"PFN_(cu[A-Za-z0-9]+)_v(\d+)(_ptsz|_ptds)?\)", typedefs):
        versions[name].add((int(ver), suffix))
    syms = defined_symbols()
    bases = sorted({re.sub(r"(_v\d)?(_ptsz|_ptds)?$", "", s) for s in syms})
    rows = []
    for base in bases:
        vs = sorted(versions.get(base, ()))
        plain = [v for v, suffix in vs if not suffix]
        per_thread = [(v, suffix) for v, suffix in vs if suffix]
        names = [base if i == 0 else f"{base}_v{i + 1}" for i in range(len(plain))]
        for v, n in zip(plain, names):
            if n in syms:
                rows.append((base, v, n, False))
        for (v, suffix), n in zip(per_thread, names[len(names) - len(per_thread):]):
            if n + suffix in syms:
                rows.append((base, v, n + suffix, True))
    out = [
        "// Generated from the PFN_<name>_v<version> typedefs of the toolkit's cudaTypedefs.h for the",
        "// entry points the sim exports: {base name, first CUDA version, symbol, per-thread flavour}.",
        "// Regenerate with sim/tools/gen_proc_address_table.py.",
        "// clang-format off",
    ]
    out += [f'MEMSIM_PROC("{b}", {v}, {s}, {"true" if p else "false"})' for b, v, s, p in rows]
    out.append("// clang-format on")
    (SRC / "proc_address_table.inc").write_text("\n".join(out) + "\n")
    print(f"{len(rows)} entries")


if __name__ == "__main__":
    main()
