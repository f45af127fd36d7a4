"""PyTorch's expandable segments under libmemshim.so at 3x the simulated device: PyTorch
reserves address space and maps physical memory of its own (cuMemAddressReserve, cuMemCreate,
cuMemMap, cuMemSetAccess; cuMemUnmap and cuMemRelease when it shrinks), which the shim pages
like cudaMalloc memory (docs/pytorch.md). Every tensor is compared bit for bit with a CPU copy,
after the segments grew past the device, after two thirds of them were freed and
torch.cuda.empty_cache() unmapped and released their memory, and after they grew again. The shim
says in its log that it pages this memory, and its exit summary shows evictions and page-ins.

Usage: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True MEMSHIM_LOG=info \\
       expandable_segments_test.py --device-memory BYTES [--factor F] [--expect-oom]
(the test runs itself again as a child to read the shim's log; with --expect-oom, run without
the shim, the same footprint must raise torch.OutOfMemoryError cleanly)
"""
import argparse
import re
import subprocess
import sys

import torch

from harness import check, finish, parse_bytes

parser = argparse.ArgumentParser()
parser.add_argument("--device-memory", type=parse_bytes, required=True)
parser.add_argument("--factor", type=int, default=3)
parser.add_argument("--child", action="store_true")
parser.add_argument("--expect-oom", action="store_true",
                    help="without the shim: the footprint raises torch.OutOfMemoryError cleanly")
args = parser.parse_args()
chunk = 8 << 20
count = args.factor * args.device_memory // chunk

if args.expect_oom:
    # Copies only: PyTorch's kernels do not run on the simulated driver.
    def pattern(i):
        return torch.arange(chunk // 4, dtype=torch.int32) * (i + 3) + i

    kept = []
    try:
        for i in range(count):
            kept.append(torch.empty(chunk // 4, dtype=torch.int32, device="cuda"))
            kept[-1].copy_(pattern(i))
        check(False, "%dx the device in expandable segments fails without the shim" % args.factor)
    except torch.OutOfMemoryError:
        check(True, "%dx the device in expandable segments raises torch.OutOfMemoryError"
              % args.factor)
    check(len(kept) > 0 and all(torch.equal(t.cpu(), pattern(i)) for i, t in enumerate(kept)),
          "the tensors allocated before it are intact", len(kept))
    finish()

if not args.child:
    run = subprocess.run([sys.executable, __file__, "--child"] + sys.argv[1:], text=True,
                         capture_output=True, timeout=280)
    sys.stdout.write("".join("  child: " + line + "\n" for line in run.stdout.splitlines()))
    check(run.returncode == 0, "the child's checks passed", run.returncode)
    check("the shim pages it like cuMemAlloc memory" in run.stderr,
          "the shim's log says it pages PyTorch's own VMM memory", run.stderr[-1500:])
    summary = re.search(r"(\d+) page-ins, (\d+) evictions", run.stderr)
    check(summary is not None and int(summary.group(1)) > 0 and int(summary.group(2)) > 0,
          "the exit summary shows page-ins and evictions",
          summary.group(0) if summary else run.stderr[-800:])
    finish()

import os  # noqa: E402  (the child's checks)

check("expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
      "expandable segments requested")
cpus, devs = [], []


def fill(i):
    cpus[i] = torch.arange(chunk // 4, dtype=torch.int32) * (i + 3) + i
    devs[i].copy_(cpus[i])


def all_equal():
    return all(d is None or torch.equal(d.cpu(), c) for d, c in zip(devs, cpus))


for i in range(count):
    cpus.append(None)
    devs.append(torch.empty(chunk // 4, dtype=torch.int32, device="cuda"))
    fill(i)
reserved = torch.cuda.memory_reserved()
check(reserved >= args.factor * args.device_memory,
      "%dx the device in expandable segments" % args.factor, "%d MiB reserved" % (reserved >> 20))
check(all_equal(), "every tensor bit-exact after the segments grew past the device")

# Free the last two thirds and give the memory back: PyTorch unmaps and releases the handles
# (cuMemUnmap, cuMemRelease) that hold no live tensor any more, and the shim frees their chunks.
freed = range(count // 3, count)
for i in freed:
    devs[i] = None
torch.cuda.synchronize()
torch.cuda.empty_cache()
check(torch.cuda.memory_reserved() < reserved, "empty_cache() released memory",
      "%d -> %d MiB" % (reserved >> 20, torch.cuda.memory_reserved() >> 20))
check(all_equal(), "the remaining tensors bit-exact after empty_cache()")

# Grow again into the freed space, with new data.
for i in freed:
    devs[i] = torch.empty(chunk // 4, dtype=torch.int32, device="cuda")
    fill(i)
check(all_equal(), "every tensor bit-exact after the segments grew again")

# Device-to-device copies between tensors that cannot all be resident at once.
for i in range(count // 2):
    devs[i].copy_(devs[count - 1 - i])
    cpus[i] = cpus[count - 1 - i].clone()
check(all_equal(), "device-to-device copies across the segments bit-exact")
stats = torch.cuda.memory_stats()
check(stats.get("num_ooms", 0) == 0, "no out-of-memory retries", stats.get("num_ooms"))
finish()
