#!/usr/bin/env python3
"""A small GPT-style training loop (random init, synthetic tokens, no downloads).

Prints one JSON line: per-step losses (as float64 hex for exact comparison),
median step time and peak device memory as seen by PyTorch's allocator.
Run it unconstrained and under LD_PRELOAD=libmemshim.so with
MEMSHIM_DEVICE_BUDGET set to half the unconstrained peak; device_check.sh
compares the losses bit for bit and reports the step-time ratio.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        x = x + a
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    def __init__(self, vocab, d, heads, layers, context):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf"), device=idx.device), diagonal=1)
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--batch", type=int, default=16)
    args = p.parse_args()

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    model = Gpt(args.vocab, args.d, args.heads, args.layers, args.context).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator(device="cpu").manual_seed(1)
    data = torch.randint(0, args.vocab, (args.steps, args.batch, args.context + 1), generator=gen)

    losses, times = [], []
    for step in range(args.steps):
        batch = data[step].to(dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.item()))
    print(json.dumps({
        "losses_hex": [x.hex() for x in losses],
        "losses": losses,
        "median_step_s": statistics.median(times[2:] if len(times) > 4 else times),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
        "preloaded": os.environ.get("LD_PRELOAD", ""),
    }))


if __name__ == "__main__":
    main()
