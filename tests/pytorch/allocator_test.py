"""PyTorch's memory machinery at a footprint larger than the simulated device, data compared bit
for bit against CPU copies. Only copies run on the device (PyTorch's own kernels have no host
implementations on the simulated driver, except the fill torch.cuda.graph launches itself:
torch_kernels/, loaded through MEMSIM_KERNELS).

Usage: allocator_test.py --device-memory BYTES [--factor 3] [--expect-oom]
With the allocator backend of PYTORCH_CUDA_ALLOC_CONF (native by default, or
backend:cudaMallocAsync). Under libmemshim.so every phase must pass; with --expect-oom (no shim)
the oversubscribed phase must raise torch.OutOfMemoryError and nothing else may fail.
"""
import argparse
import gc

import torch

from harness import check, finish, parse_bytes
from tensors import pattern, to_device

parser = argparse.ArgumentParser()
parser.add_argument("--device-memory", type=parse_bytes, required=True)
parser.add_argument("--factor", type=float, default=3.0)
parser.add_argument("--expect-oom", action="store_true")
args = parser.parse_args()

MIB = 1 << 20
dev = torch.device("cuda")
native = torch.cuda.get_allocator_backend() == "native"
print("allocator backend:", torch.cuda.get_allocator_backend())


def small_blocks_and_growth():
    """Many small tensors (block splitting in the small pool), then growing large ones."""
    small = [pattern(4096 + 37 * i, i) for i in range(200)]
    on_dev = [to_device(c) for c in small]
    check(all(torch.equal(d.cpu(), c) for d, c in zip(on_dev, small)), "200 small tensors")
    large = [pattern(n * MIB // 4, 1000 + n) for n in (1, 3, 7, 12, 20)]
    on_dev_large = [to_device(c) for c in large]
    check(all(torch.equal(d.cpu(), c) for d, c in zip(on_dev_large, large)),
          "growing large tensors (segment growth)")
    del on_dev, on_dev_large
    if native:
        before = torch.cuda.memory_reserved()
        torch.cuda.empty_cache()
        check(torch.cuda.memory_reserved() < before, "empty_cache() returns cached segments",
              "%d -> %d" % (before, torch.cuda.memory_reserved()))


def oversubscribe():
    """Live tensors totalling `factor` times the device, all checked at the end."""
    chunk = 16 * MIB
    count = int(args.factor * args.device_memory) // chunk
    cpus, devs = [], []
    try:
        for i in range(count):
            cpus.append(pattern(chunk // 4, 5000 + i))
            devs.append(to_device(cpus[-1]))
    except torch.OutOfMemoryError as e:
        if args.expect_oom:
            check(True, "without the shim, %.1fx the device raises torch.OutOfMemoryError" %
                  args.factor, str(e).split(".")[0])
            del devs
            gc.collect()
            torch.cuda.empty_cache()
            return False
        raise
    check(not args.expect_oom, "%d MiB live on a %d MiB device" %
          (count * chunk // MIB, args.device_memory // MIB))
    check(all(torch.equal(d.cpu(), c) for d, c in zip(devs, cpus)),
          "every oversubscribed tensor bit-exact")
    copies = [torch.empty_like(devs[i]) for i in range(0, count, 8)]
    for j, i in enumerate(range(0, count, 8)):
        copies[j].copy_(devs[i])
    check(all(torch.equal(copies[j].cpu(), cpus[i]) for j, i in enumerate(range(0, count, 8))),
          "device-to-device copies of oversubscribed tensors")
    del copies
    if native:
        # The OOM-retry path: the cache holds freed 16 MiB blocks that cannot serve 24 MiB
        # requests; with the virtual capacity below live + cached + new (the tests give the
        # shim a host tier of about 2.5x the device), cudaMalloc fails, the allocator frees its
        # cache and retries.
        stats = torch.cuda.memory_stats()
        del devs[::2], cpus[::2]
        big = pattern(3 * chunk // 8, 77)
        try:
            more = [to_device(big) for _ in range(count // 3)]
            check(all(torch.equal(m.cpu(), big) for m in more[:4]), "allocations after frees")
            retries = torch.cuda.memory_stats()["num_alloc_retries"]
            check(retries > stats["num_alloc_retries"],
                  "a failed cudaMalloc freed the cache and was retried (memory_stats)",
                  "%d retries" % retries)
            del more
        except torch.OutOfMemoryError as e:
            check(False, "allocations after frees", e)
        check(all(torch.equal(d.cpu(), c) for d, c in zip(devs, cpus)),
              "surviving tensors intact after the retries")
    del devs
    gc.collect()
    return True


def pinned_and_streams():
    """Pinned memory with non_blocking copies, two streams ordered by an event, record_stream."""
    src = pattern(8 * MIB // 4, 9).pin_memory()
    back = torch.empty_like(src).pin_memory()
    check(src.is_pinned(), "pin_memory()")
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.empty(src.shape, dtype=src.dtype, device=dev)
    with torch.cuda.stream(producer):
        x.copy_(src, non_blocking=True)
        ready = torch.cuda.Event()
        ready.record(producer)
    with torch.cuda.stream(consumer):
        consumer.wait_event(ready)
        y = torch.empty_like(x)
        y.copy_(x, non_blocking=True)
        x.record_stream(consumer)
        back.copy_(y, non_blocking=True)
    del x  # its block returns to the pool only after the consumer's work
    reuse = torch.empty(src.shape, dtype=src.dtype, device=dev)
    reuse.copy_(pattern(8 * MIB // 4, 10))
    consumer.synchronize()
    check(torch.equal(back, src), "producer/consumer streams with an event and record_stream")
    done = torch.cuda.Event(enable_timing=True)
    start = torch.cuda.Event(enable_timing=True)
    start.record()
    reuse.copy_(y)
    done.record()
    done.synchronize()
    check(start.elapsed_time(done) >= 0, "event timing")


def graph_of_copies():
    """PyTorch's copies captured with torch.cuda.graph on a side stream and replayed with new
    inputs (graph_test.py tests graphs further).

    Note [no allocation in the capture]: nothing is allocated during the capture, so that it runs
    with both allocator backends: with backend:cudaMallocAsync, a tensor allocated during a
    capture becomes a graph memory node, which the simulated driver does not implement.
    """
    static_in = to_device(pattern(MIB, 1))
    static_out = torch.empty_like(static_in)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        static_out.copy_(static_in)
    for seed in (2, 3):
        new = pattern(MIB, seed)
        static_in.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        check(torch.equal(static_out.cpu(), new), "graph replay %d copies the new input" % seed)
    del graph


small_blocks_and_growth()
if oversubscribe():
    pinned_and_streams()
    graph_of_copies()
finish()
