#!/usr/bin/env python3
"""PyTorch's own kernels (elementwise, cuBLAS GEMM, reductions) over a working set larger than
the device budget: the GPU check runs it unconstrained and under the shim, and the checksums
must be equal bit for bit.

Tensors of `--tensor-mib` each, `--footprint-mib` in all, filled from seeded device generators.
Each pass updates every tensor from itself and its neighbour (tanh of a mix); every eighth
tensor also gets a GEMM of itself with a distant tensor (cuBLAS). After the eager passes, a
`torch.cuda.graph` (global capture mode, PyTorch's default) captures the update of the first
tensors and is replayed; replays read and write memory the shim has to page in first.

Prints progress lines "checksum_eager 0x..." and "checksum_graph 0x..." (sum over tensors of
(index + 1) * the int32 words' sum, mod 2**64) as soon as each is known, then one JSON line.
Runs only on a GPU: PyTorch's kernels cannot run on the simulated driver.
Usage: torch_native.py [--footprint-mib N] [--tensor-mib N] [--passes N] [--replays N]
"""
import argparse
import json
import time

import torch


def checksum(tensors):
    total = 0
    for i, t in enumerate(tensors):
        words = int(torch.sum(t.view(torch.int32), dtype=torch.int64).item())
        total = (total + (i + 1) * words) % (1 << 64)
    return "0x%016x" % total


def update(tensors, i, side):
    x, y = tensors[i], tensors[(i + 1) % len(tensors)]
    x.copy_(torch.tanh(x * 0.75 + y * 0.25))
    if i % 8 == 0:
        z = tensors[(i + len(tensors) // 2) % len(tensors)]
        x.add_((x.view(side, side) @ z.view(side, side)).view(-1), alpha=1.0 / side)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--footprint-mib", type=int, default=8192)
    parser.add_argument("--tensor-mib", type=int, default=64)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--replays", type=int, default=3)
    parser.add_argument("--graph-tensors", type=int, default=8)
    args = parser.parse_args()

    elems = args.tensor_mib << 18  # float32
    side = int(elems ** 0.5)
    assert side * side == elems, "--tensor-mib must be a square number of float32s (e.g. 64)"
    count = args.footprint_mib // args.tensor_mib
    torch.cuda.init()
    t0 = time.perf_counter()
    tensors = []
    for i in range(count):
        gen = torch.Generator(device="cuda").manual_seed(i)
        tensors.append(torch.rand(elems, device="cuda", generator=gen) - 0.5)
    for _ in range(args.passes):
        for i in range(count):
            update(tensors, i, side)
    torch.cuda.synchronize()
    eager_s = time.perf_counter() - t0
    eager = checksum(tensors)
    print("checksum_eager", eager, flush=True)

    # Warm-up on a side stream, as torch.cuda.graph's documentation asks, then capture.
    side_stream = torch.cuda.Stream()
    side_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side_stream):
        for i in range(args.graph_tensors):
            update(tensors, i, side)
    torch.cuda.current_stream().wait_stream(side_stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(args.graph_tensors):
            update(tensors, i, side)
    t1 = time.perf_counter()
    for _ in range(args.replays):
        # Touch the rest of the working set between replays so the graph's memory is evicted.
        for i in range(args.graph_tensors, count):
            update(tensors, i, side)
        graph.replay()
    torch.cuda.synchronize()
    graph_s = time.perf_counter() - t1
    replayed = checksum(tensors)
    print("checksum_graph", replayed, flush=True)
    print(json.dumps({
        "checksum_eager": eager,
        "checksum_graph": replayed,
        "eager_s": eager_s,
        "graph_s": graph_s,
        "tensors": count,
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
        "free_total_bytes": list(torch.cuda.mem_get_info()),
    }))


if __name__ == "__main__":
    main()
