#!/usr/bin/env python3
"""Regenerates the entry-point flavour tables from the toolkit's cudaTypedefs.h.

cudaTypedefs.h names the CUDA version that introduced each flavour of an entry point
(PFN_<name>_v<version>, with a _ptds/_ptsz suffix for per-thread default-stream flavours). The n-th
version of a base name is exported as <name>, <name>_v2, <name>_v3, ...; per-thread flavours attach
to the newest names. cuGetProcAddress(name, version, flags) answers with the flavour of the highest
version not above `version`, per-thread if the flags ask for it and the name has such a flavour.

Writes two tables with the same rows:
  sim/src/proc_address_table.inc      the sim's cuGetProcAddress table: the flavours the sim
                                      defines in sim/src/api_*.cc and proc_address.cc
  shim/driver/cuda_entry_points.inc   every flavour cudaTypedefs.h lists, for libmemshim.so's
                                      lookups and its tests (names only: no sim code)

usage: gen_proc_address_table.py [CUDA_INCLUDE_DIR [OUTPUT_ROOT]]
       (defaults /usr/local/cuda/include and the source tree; tests/shim regenerates into a
       temporary OUTPUT_ROOT to check that the committed tables are current)
"""
import collections
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
SRC = ROOT / "sim" / "src"


def defined_symbols():
    text = "".join(p.read_text() for p in sorted(SRC.glob("api_*.cc")))
    text += (SRC / "proc_address.cc").read_text()
    syms = set(re.findall(r"CUresult CUDAAPI (cu\w+)\(", text))
    for a, b in re.findall(r"MEMSIM_BOTH_FLAVOURS\(\s*(cu\w+),\s*(cu\w+)", text):
        syms.update((a, b))
    syms.update(re.findall(r"MEMSIM_NOT_SUPPORTED\((cu\w+)", text))
    return syms


def flavour_rows(include):
    """(base, first version, symbol, per-thread, PFN typedef) for every typedef, by base name."""
    typedefs = "".join((include / h).read_text()
                       for h in ("cudaTypedefs.h", "cudaProfilerTypedefs.h"))
    versions = collections.defaultdict(set)
    for name, ver, suffix in re.findall(r"PFN_(cu[A-Za-z0-9]+)_v(\d+)(_ptsz|_ptds)?\)", typedefs):
        versions[name].add((int(ver), suffix))
    rows = []
    for base in sorted(versions):
        vs = sorted(versions[base])
        plain = [v for v, suffix in vs if not suffix]
        per_thread = [(v, suffix) for v, suffix in vs if suffix]
        names = [base if i == 0 else f"{base}_v{i + 1}" for i in range(len(plain))]
        for v, n in zip(plain, names):
            rows.append((base, v, n, False, f"PFN_{base}_v{v}"))
        for (v, suffix), n in zip(per_thread, names[len(names) - len(per_thread):]):
            rows.append((base, v, n + suffix, True, f"PFN_{base}_v{v}{suffix}"))
    return rows


def cuda_version(include):
    return int(re.search(r"#define CUDA_VERSION (\d+)", (include / "cuda.h").read_text()).group(1))


def main():
    include = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/local/cuda/include")
    out_root = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT
    rows = flavour_rows(include)
    syms = defined_symbols()
    sim = [
        "// Generated from the PFN_<name>_v<version> typedefs of the toolkit's cudaTypedefs.h for the",
        "// entry points the sim exports: {base name, first CUDA version, symbol, per-thread flavour}.",
        "// Regenerate with sim/tools/gen_proc_address_table.py.",
        "// clang-format off",
    ]
    sim += [f'MEMSIM_PROC("{b}", {v}, {s}, {"true" if p else "false"})'
            for b, v, s, p, _ in rows if s in syms]
    sim.append("// clang-format on")
    (out_root / "sim" / "src").mkdir(parents=True, exist_ok=True)
    (out_root / "sim" / "src" / "proc_address_table.inc").write_text("\n".join(sim) + "\n")

    shared = [
        "// Generated from the PFN_<name>_v<version> typedefs of the toolkit's cudaTypedefs.h (CUDA",
        f"// {cuda_version(include)}): every flavour of every driver entry point, as",
        "// MEMVIRT_ENTRY_POINT(base name, first CUDA version, flavour symbol, per-thread flavour,",
        "// PFN typedef of that version). Rows of one base name are consecutive, plain flavours by",
        "// version, then per-thread ones. Regenerate with sim/tools/gen_proc_address_table.py.",
        f"#define MEMVIRT_ENTRY_POINTS_CUDA_VERSION {cuda_version(include)}",
        "// clang-format off",
    ]
    shared += [f"MEMVIRT_ENTRY_POINT({b}, {v}, {s}, {1 if p else 0}, {t})" for b, v, s, p, t in rows]
    shared.append("// clang-format on")
    (out_root / "shim" / "driver").mkdir(parents=True, exist_ok=True)
    (out_root / "shim" / "driver" / "cuda_entry_points.inc").write_text("\n".join(shared) + "\n")
    print(f"{sum(1 for r in rows if r[2] in syms)} sim entries, {len(rows)} flavours")


if __name__ == "__main__":
    main()
