"""torch.multiprocessing shares a CUDA tensor between processes under libmemshim.so (legacy
IPC of shim memory: docs/shim.md, "Compatibility"). Both processes page memory of their own
(3x the device budget) while the tensor is shared; PyTorch's kernels cannot run on the sim, so
the checks use copies only: the parent fills the tensor, the child reads it and writes a second
pattern back through a device-to-device copy, the parent verifies it, and after the child has
let go, the tensor pages like any other and keeps its bytes."""
import argparse
import os
import sys

# Both processes on one simulated node (the child inherits the environment).
if not os.environ.get("MEMSIM_NODE"):
    os.environ["MEMSIM_NODE"] = "pytorch-ipc-%d" % os.getpid()

import torch
import torch.multiprocessing as mp

from harness import check, finish, parse_bytes

BLOCK = 4 << 20  # bytes of other tensors per pressure block


def pattern(elements, seed):
    return (torch.arange(elements, dtype=torch.int64) * (2 * seed + 1) + seed).to(torch.int32)


class Pressure:
    """Tensors of 3x the budget, read back (paged) in every round."""

    def __init__(self, total, seed):
        n = BLOCK // 4
        self.cpu = [pattern(n, seed + i) for i in range(total // BLOCK)]
        self.gpu = [t.to("cuda") for t in self.cpu]

    def round(self):
        return all(torch.equal(g.cpu(), c) for g, c in zip(self.gpu, self.cpu))


def child(inbox, outbox, pressure_bytes):
    pressure = Pressure(pressure_bytes, 1000)
    shared, elements = inbox.get()
    ok = pressure.round()
    outbox.put(("read", torch.equal(shared.cpu(), pattern(elements, 1))))
    staging = pattern(elements, 2).to("cuda")
    ok &= pressure.round()
    shared.copy_(staging)  # device to device, into the parent's memory
    torch.cuda.synchronize()
    outbox.put(("written", torch.equal(shared.cpu(), pattern(elements, 2))))
    inbox.get()  # the parent has verified
    ok &= pressure.round()
    del shared
    outbox.put(("pressure", ok))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pressure", default="192M")
    args = parser.parse_args()
    pressure_bytes = parse_bytes(args.pressure)
    ctx = mp.get_context("spawn")
    pressure = Pressure(pressure_bytes, 100)
    elements = (6 << 20) // 4
    base = pattern(elements + 1024, 1).to("cuda")
    shared = base[1024:]  # a view: PyTorch shares the allocation's base and an offset
    shared.copy_(pattern(elements, 1).to("cuda"))
    inbox, outbox = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=child, args=(inbox, outbox, pressure_bytes))
    proc.start()
    inbox.put((shared, elements))
    ok = pressure.round()
    replies = {}
    while len(replies) < 2:
        what, value = outbox.get(timeout=240)
        replies[what] = value
    check(replies.get("read"), "the child reads the parent's tensor")
    check(replies.get("written"), "the child writes it back through its mapping")
    ok &= pressure.round()
    check(torch.equal(shared.cpu(), pattern(elements, 2)), "the parent sees the child's write")
    check(torch.equal(base[:1024].cpu(), pattern(elements + 1024, 1)[:1024]),
          "the bytes before the view are untouched")
    inbox.put("verified")
    what, value = outbox.get(timeout=240)
    check(what == "pressure" and value, "the child's own memory paged intact")
    proc.join(timeout=240)
    check(proc.exitcode == 0, "the child exits cleanly", proc.exitcode)
    ok &= pressure.round()
    ok &= pressure.round()
    check(torch.equal(shared.cpu(), pattern(elements, 2)), "the tensor keeps its bytes once released")
    check(ok, "the parent's own memory paged intact")
    finish()


if __name__ == "__main__":
    sys.exit(main())
