"""PyTorch's expandable segments under libmemshim.so: PyTorch maps physical memory of its own
(cuMemCreate/cuMemMap), which the shim counts against the device budget but cannot page
(docs/pytorch.md). Within the device the data is exact and the shim says in its log what it does
not page; beyond it the allocation fails cleanly with torch.OutOfMemoryError.

Usage: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True MEMSHIM_LOG=info \\
       expandable_segments_test.py --device-memory BYTES
(the test runs itself again as a child to read the shim's log)
"""
import argparse
import os
import subprocess
import sys

import torch

from harness import check, finish, parse_bytes

parser = argparse.ArgumentParser()
parser.add_argument("--device-memory", type=parse_bytes, required=True)
parser.add_argument("--child", action="store_true")
args = parser.parse_args()

if not args.child:
    run = subprocess.run([sys.executable, __file__, "--child"] + sys.argv[1:], text=True,
                         capture_output=True, timeout=240)
    sys.stdout.write("".join("  child: " + line + "\n" for line in run.stdout.splitlines()))
    check(run.returncode == 0, "the child's checks passed", run.returncode)
    check("maps device memory of its own" in run.stderr,
          "the shim's log says what it does not page", run.stderr[-1500:])
    finish()

check("expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
      "expandable segments requested")
chunk = 8 << 20
cpus, devs = [], []
for i in range(args.device_memory // 2 // chunk):
    cpus.append(torch.arange(chunk // 4, dtype=torch.int32) * (i + 3))
    devs.append(torch.empty(chunk // 4, dtype=torch.int32, device="cuda"))
    devs[-1].copy_(cpus[-1])
check(all(torch.equal(d.cpu(), c) for d, c in zip(devs, cpus)),
      "half the device in expandable segments, bit-exact")
try:
    for i in range(3 * args.device_memory // chunk):
        devs.append(torch.empty(chunk // 4, dtype=torch.int32, device="cuda"))
    check(False, "3x the device in expandable segments fails (the shim cannot page it)")
except torch.OutOfMemoryError:
    check(True, "3x the device in expandable segments raises torch.OutOfMemoryError")
devs = devs[: len(cpus)]
check(all(torch.equal(d.cpu(), c) for d, c in zip(devs, cpus)), "earlier tensors intact after it")
finish()
