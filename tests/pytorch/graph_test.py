"""torch.cuda.graph on the simulated driver: PyTorch's copies captured on a side stream (an H2D
copy from pinned memory with non_blocking, device-to-device copies, a clone into the graph's
private pool, a D2H copy back to pinned memory), replayed with new inputs and compared bit for
bit with CPU copies while the process keeps --live bytes of tensors on a device of
--device-memory (under libmemshim.so: 3x the device; without it: within the device). Then
torch.cuda.make_graphed_callables on a copy whose input needs a gradient: a forward and a
backward graph, the backward's capture spanning two streams joined through events.

torch.cuda.graph's capture prologue fills PyTorch's RNG seed and offset tensors with one of
PyTorch's own kernels; its host implementation for the simulated driver is in
torch_kernels/torch_kernels_host.cc (MEMSIM_KERNELS), and the fill is checked on its own first.

Usage: graph_test.py --device-memory BYTES --live BYTES [--replays N] [--expect-paging]
With --expect-paging (under libmemshim.so with MEMSHIM_LOG=info) the test runs itself again as a
child to read the shim's log: the replays must have paged the graph's memory in.
"""
import argparse
import os
import re
import subprocess
import sys

import torch

from harness import check, finish, parse_bytes
from tensors import pattern, to_device

parser = argparse.ArgumentParser()
parser.add_argument("--device-memory", type=parse_bytes, required=True)
parser.add_argument("--live", type=parse_bytes, required=True)
parser.add_argument("--replays", type=int, default=4)
parser.add_argument("--expect-paging", action="store_true")
parser.add_argument("--child", action="store_true")
args = parser.parse_args()

if args.expect_paging and not args.child:
    run = subprocess.run([sys.executable, __file__, "--child"] + sys.argv[1:], text=True,
                         capture_output=True, timeout=540)
    sys.stdout.write("".join("  child: " + line + "\n" for line in run.stdout.splitlines()))
    check(run.returncode == 0, "the child's checks passed", run.returncode)
    shimmed = "LD_PRELOAD" in os.environ and "virtual device memory" in run.stderr
    check(shimmed, "the child ran under the shim", "" if shimmed else run.stderr[-1500:])
    # The summary the shim logs for an executable graph when it is destroyed
    # (shim/core/shim_core_graph.cc, MEMSHIM_LOG=info).
    launches = [(int(n), int(p)) for n, p in re.findall(
        r"graph_launches (\d+) graph_page_ins (\d+)", run.stderr)]
    check(any(n == args.replays and p > 0 for n, p in launches),
          "the shim paged the graph's memory in for its %d replays" % args.replays, launches)
    finish()

MIB = 1 << 20
CHUNK = 16 * MIB
STAGED = 8 * MIB
GRAPH_PAIRS = 3
dev = torch.device("cuda")


def check_fill():
    """The kernel of the capture prologue, reached through Tensor.fill_ of int64 tensors."""
    value = -(1 << 62) + 12345
    for n in (1, 2, 3, 1000003):
        t = torch.empty(n, dtype=torch.int64, device=dev)
        t.fill_(value)
        check(torch.equal(t.cpu(), torch.full((n,), value, dtype=torch.int64)),
              "int64 fill_ of %d elements on the device" % n)


class Ballast:
    """Live tensors beside the graph's, read in turns between replays (under the shim this pages
    the graph's tensors out, so every replay pages them back in)."""

    def __init__(self, count):
        self.tensors = [to_device(pattern(CHUNK // 4, 100 + i)) for i in range(count)]
        self.turn = 0

    def read_some(self):
        n = max(1, len(self.tensors) // 3)
        for _ in range(n):
            i = self.turn % len(self.tensors)
            self.turn += 1
            if not torch.equal(self.tensors[i].cpu(), pattern(CHUNK // 4, 100 + i)):
                return False
        return True

    def read_all(self):
        return all(torch.equal(t.cpu(), pattern(CHUNK // 4, 100 + i))
                   for i, t in enumerate(self.tensors))


def graph_of_copies():
    graph_bytes = 2 * GRAPH_PAIRS * CHUNK + 2 * STAGED
    ballast = Ballast(max(0, (args.live - graph_bytes) // CHUNK))
    live = graph_bytes + len(ballast.tensors) * CHUNK
    print("%d MiB live on a %d MiB device (%.2fx)" % (live // MIB, args.device_memory // MIB,
                                                       live / args.device_memory))

    host_in = pattern(STAGED // 4, 1).pin_memory()
    host_out = torch.empty_like(host_in).pin_memory()
    check(host_in.is_pinned() and host_out.is_pinned(), "pinned host buffers")
    staged = torch.empty(host_in.shape, dtype=torch.int32, device=dev)
    ins = [to_device(pattern(CHUNK // 4, 10 + i)) for i in range(GRAPH_PAIRS)]
    sentinel = pattern(CHUNK // 4, 99)
    outs = [to_device(sentinel) for _ in range(GRAPH_PAIRS)]

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        staged.copy_(host_in, non_blocking=True)
        for i in range(GRAPH_PAIRS):
            outs[i].copy_(ins[i])
        cloned = staged.clone()  # allocated from the graph's private pool
        host_out.copy_(cloned, non_blocking=True)
    torch.cuda.synchronize()
    check(all(torch.equal(o.cpu(), sentinel) for o in outs),
          "capture records the copies without running them")
    check(ballast.read_all(), "live tensors intact after the capture")

    other = torch.cuda.Stream()
    for r in range(1, args.replays + 1):
        host_in.copy_(pattern(STAGED // 4, 1000 + r))
        expected = [pattern(CHUNK // 4, 2000 + 10 * r + i) for i in range(GRAPH_PAIRS)]
        for i in range(GRAPH_PAIRS):
            ins[i].copy_(expected[i])
        check(ballast.read_some(), "replay %d: live tensors read back before it" % r)
        if r % 2:
            graph.replay()
        else:
            other.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(other):
                graph.replay()
        torch.cuda.synchronize()
        where = "its current stream" if r % 2 else "another stream"
        check(all(torch.equal(o.cpu(), e) for o, e in zip(outs, expected)),
              "replay %d on %s: device-to-device copies bit-exact" % (r, where))
        check(torch.equal(cloned.cpu(), host_in), "replay %d: pinned H2D copy and clone" % r)
        check(torch.equal(host_out, host_in), "replay %d: D2H copy into pinned memory" % r)
    check(ballast.read_all(), "every live tensor bit-exact after the replays")
    del graph


class Copy(torch.autograd.Function):
    """A copy whose backward is a copy too (clone of contiguous tensors: cudaMemcpyAsync)."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad.clone()


def graphed_callable():
    """torch.cuda.make_graphed_callables on a copy whose input needs a gradient: PyTorch captures
    the forward and the backward as two graphs; capturing the backward forks the capture to
    another stream and joins it back through events (the sim's cross-stream capture)."""
    sample = to_device(pattern(MIB, 3).float()).requires_grad_(True)
    graphed = torch.cuda.make_graphed_callables(Copy.apply, (sample,))
    for seed in (4, 5):
        new = pattern(MIB, seed).float()
        grad = pattern(MIB, seed + 10).float()
        x = to_device(new).requires_grad_(True)
        out = graphed(x)
        out.backward(to_device(grad))
        torch.cuda.synchronize()
        check(torch.equal(out.detach().cpu(), new),
              "graphed callable replays the forward copy (input %d)" % seed)
        check(torch.equal(x.grad.cpu(), grad),
              "graphed callable replays the backward copy (input %d)" % seed)


check_fill()
graph_of_copies()
graphed_callable()
finish()
