#!/usr/bin/env python3
"""Holds the simulated driver to a real driver's recorded answers.

Compares a driver_probe.json written on the simulated driver with the one a real GPU wrote
(tests/gpu/reference/), answer by answer. Measurements (latencies, bandwidths, memory size,
addresses) are skipped: the sim's are not meant to match. An answer the reference lacks (a probe
newer than the recording) is listed, not failed.
Usage: compare_probe.py REFERENCE.json ACTUAL.json      (exit 1 on any differing answer)
"""
import json
import sys

MEASURED_SUFFIXES = ("_us", "_gbps")
MEASURED_KEYS = {"total_mem_bytes", "dlsym"}


def flatten(d, prefix=""):
    for key, value in d.items():
        if isinstance(value, dict):
            yield from flatten(value, prefix + key + ".")
        elif key not in MEASURED_KEYS and not key.endswith(MEASURED_SUFFIXES):
            yield prefix + key, value


def main():
    reference, actual = (dict(flatten(json.load(open(p)))) for p in sys.argv[1:3])
    differ = [k for k in reference if k in actual and reference[k] != actual[k]]
    missing = [k for k in reference if k not in actual]
    unrecorded = [k for k in actual if k not in reference]
    for k in differ:
        print("DIFFERS %s: real %r, sim %r" % (k, reference[k], actual[k]))
    for k in missing:
        print("MISSING %s: real %r, not answered here" % (k, reference[k]))
    if unrecorded:
        print("not yet recorded on a GPU: " + ", ".join(unrecorded))
    print("note: %d answers compared, %d differ, %d missing, %d not yet recorded" % (
        len(reference) - len(missing), len(differ), len(missing), len(unrecorded)))
    return 1 if differ or missing else 0


if __name__ == "__main__":
    sys.exit(main())
