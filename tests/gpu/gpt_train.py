#!/usr/bin/env python3
"""A small GPT-style training loop whose compute runs in this project's own CUDA kernels.

Embedding, causal self-attention, MLP with GELU, layer norm and a language-model head, random
init and synthetic tokens (no downloads), trained with autograd and an AdamW optimizer. Every
operation on the device is a kernel of libgpt_kernels.so (tests/pytorch/gpt_kernels, called
through ctypes on PyTorch tensors and PyTorch's current stream) or a copy; PyTorch provides the
tensors, its caching allocator, streams and autograd. The same script runs on a GPU (the GPU
check) and on the simulated driver, where MEMSIM_KERNELS names the kernels' host
implementations.

Note [one consumer per tensor]: PyTorch accumulates gradients of a tensor used twice with its
own kernels, which the simulated driver cannot run; so each transformer block (residuals
included) is one autograd Function with a hand-written backward, and every tensor and parameter
is consumed exactly once. The loss's initial gradient is passed explicitly for the same reason.

Prints one JSON line: per-step losses (float64 hex, for bit-exact comparison), median step
time, peak memory seen by PyTorch's allocator.
Usage: gpt_train.py [--lib PATH] [--steps N] [--layers L] [--d D] [--heads H] [--vocab V]
                    [--context T] [--batch B]
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
F32, I64 = torch.float32, torch.int64


class Kernels:
    """ctypes bindings of libgpt_kernels.so; every call launches on PyTorch's current stream."""

    SIGNATURES = {
        "gemm": "iiiipliipliipliff",
        "add_bias": "ipp", "bias_grad": "iipp", "add": "ppp", "fill": "pf",
        "gelu": "pp", "gelu_grad": "ppp",
        "layernorm": "ipppppp", "layernorm_grad_x": "ipppppp",
        "layernorm_grad_params": "iipppppp",
        "attention": "iiippp", "attention_grad_q": "iiippppp", "attention_grad_kv": "iiippppp",
        "embedding": "iipppp", "embedding_grad_tokens": "iippp",
        "embedding_grad_positions": "iiipp",
        "cross_entropy": "ipppp", "cross_entropy_grad": "iippppp", "mean": "ipp",
        "adamw": "ppppfffffff",
    }
    CTYPES = {"i": ctypes.c_int, "l": ctypes.c_long, "p": ctypes.c_void_p, "f": ctypes.c_float}

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        for name, sig in self.SIGNATURES.items():
            fn = getattr(self.lib, "gpt_" + name)
            fn.argtypes = [ctypes.c_void_p, ctypes.c_long] + [self.CTYPES[c] for c in sig]
            fn.restype = ctypes.c_int

    def __getattr__(self, name):
        fn = getattr(self.lib, "gpt_" + name)

        def launch(n, *args):
            conv = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]
            err = fn(torch.cuda.current_stream().cuda_stream, n, *conv)
            if err != 0:
                raise RuntimeError("gpt_%s: CUDA error %d" % (name, err))
        return launch


K = None  # Kernels, set in main()


def empty(*shape, dtype=F32):
    return torch.empty(*shape, dtype=dtype, device="cuda")


def linear(x, w, b):
    """x [R, I] @ w [I, O] + b."""
    rows, inp = x.shape
    out = w.shape[1]
    y = empty(rows, out)
    K.gemm(rows * out, 1, rows, out, inp, x, 0, inp, 0, w, 0, out, 0, y, 0, out, 1.0, 0.0)
    K.add_bias(rows * out, out, y, b)
    return y


def linear_grad(x, w, dy):
    """Gradients of linear(): dx, dw, db."""
    rows, inp = x.shape
    out = w.shape[1]
    dx, dw, db = empty(rows, inp), empty(inp, out), empty(out)
    K.gemm(rows * inp, 1, rows, inp, out, dy, 0, out, 0, w, 0, out, 1, dx, 0, inp, 1.0, 0.0)
    K.gemm(inp * out, 1, inp, out, rows, x, 0, inp, 1, dy, 0, out, 0, dw, 0, out, 1.0, 0.0)
    K.bias_grad(out, rows, out, dy, db)
    return dx, dw, db


def layernorm(x, g, b):
    rows, cols = x.shape
    y, mean, rstd = empty(rows, cols), empty(rows), empty(rows)
    K.layernorm(rows, cols, x, g, b, y, mean, rstd)
    return y, mean, rstd


def layernorm_grad(x, g, mean, rstd, dy):
    rows, cols = x.shape
    dx, dg, db = empty(rows, cols), empty(cols), empty(cols)
    K.layernorm_grad_x(rows, cols, x, g, mean, rstd, dy, dx)
    K.layernorm_grad_params(cols, rows, cols, x, mean, rstd, dy, dg, db)
    return dx, dg, db


def add(a, b):
    out = empty(*a.shape)
    K.add(a.numel(), a, b, out)
    return out


class Embedding(torch.autograd.Function):
    @staticmethod
    def forward(ctx, idx, wte, wpe):
        batch, t_len = idx.shape
        channels = wte.shape[1]
        x = empty(batch * t_len, channels)
        K.embedding(x.numel(), t_len, channels, idx, wte, wpe, x)
        ctx.save_for_backward(idx)
        ctx.shapes = (batch, t_len, wte.shape[0], channels)
        return x

    @staticmethod
    def backward(ctx, dx):
        (idx,) = ctx.saved_tensors
        batch, t_len, vocab, channels = ctx.shapes
        dwte, dwpe = empty(vocab, channels), empty(t_len, channels)
        K.embedding_grad_tokens(dwte.numel(), batch * t_len, channels, idx, dx, dwte)
        K.embedding_grad_positions(dwpe.numel(), batch, t_len, channels, dx, dwpe)
        return None, dwte, dwpe


class Block(torch.autograd.Function):
    """x + attn(ln1(x)), then + mlp(ln2(.)): one Function (Note [one consumer per tensor])."""

    @staticmethod
    def forward(ctx, x, shape, g1, b1, wqkv, bqkv, wo, bo, g2, b2, w1, bm1, w2, bm2):
        batch, t_len, heads = shape
        rows, channels = x.shape
        h, m1, r1 = layernorm(x, g1, b1)
        qkv = linear(h, wqkv, bqkv)
        p, att = empty(batch, heads, t_len, t_len), empty(rows, channels)
        K.attention(batch * heads * t_len, heads, t_len, channels, qkv, p, att)
        y1 = add(x, linear(att, wo, bo))
        h2, m2, r2 = layernorm(y1, g2, b2)
        u = linear(h2, w1, bm1)
        a = empty(*u.shape)
        K.gelu(u.numel(), u, a)
        y = add(y1, linear(a, w2, bm2))
        ctx.save_for_backward(x, g1, m1, r1, h, wqkv, qkv, p, att, wo, y1, g2, m2, r2, h2, w1,
                              u, a, w2)
        ctx.shape = shape
        return y

    @staticmethod
    def backward(ctx, dy):
        (x, g1, m1, r1, h, wqkv, qkv, p, att, wo, y1, g2, m2, r2, h2, w1, u, a,
         w2) = ctx.saved_tensors
        batch, t_len, heads = ctx.shape
        rows, channels = x.shape
        da, dw2, dbm2 = linear_grad(a, w2, dy)
        du = empty(*u.shape)
        K.gelu_grad(u.numel(), u, da, du)
        dh2, dw1, dbm1 = linear_grad(h2, w1, du)
        dln2, dg2, db2 = layernorm_grad(y1, g2, m2, r2, dh2)
        dy1 = add(dy, dln2)
        datt, dwo, dbo = linear_grad(att, wo, dy1)
        ds, dqkv = empty(batch, heads, t_len, t_len), empty(rows, 3 * channels)
        K.attention_grad_q(batch * heads * t_len, heads, t_len, channels, qkv, p, datt, ds, dqkv)
        K.attention_grad_kv(batch * heads * t_len, heads, t_len, channels, qkv, p, ds, datt, dqkv)
        dh, dwqkv, dbqkv = linear_grad(h, wqkv, dqkv)
        dln1, dg1, db1 = layernorm_grad(x, g1, m1, r1, dh)
        dx = add(dy1, dln1)
        return (dx, None, dg1, db1, dwqkv, dbqkv, dwo, dbo, dg2, db2, dw1, dbm1, dw2, dbm2)


class HeadLoss(torch.autograd.Function):
    """Final layer norm, language-model head and mean cross-entropy."""

    @staticmethod
    def forward(ctx, x, g, b, w, targets):
        rows = x.shape[0]
        vocab = w.shape[1]
        h, mean, rstd = layernorm(x, g, b)
        logits = empty(rows, vocab)
        K.gemm(rows * vocab, 1, rows, vocab, x.shape[1], h, 0, x.shape[1], 0, w, 0, vocab, 0,
               logits, 0, vocab, 1.0, 0.0)
        losses, lse, loss = empty(rows), empty(rows), empty(1)
        K.cross_entropy(rows, vocab, logits, targets, losses, lse)
        K.mean(1, rows, losses, loss)
        ctx.save_for_backward(x, g, mean, rstd, h, w, logits, targets, lse)
        return loss

    @staticmethod
    def backward(ctx, dloss):
        x, g, mean, rstd, h, w, logits, targets, lse = ctx.saved_tensors
        rows, vocab = logits.shape
        channels = x.shape[1]
        dlogits = empty(rows, vocab)
        K.cross_entropy_grad(dlogits.numel(), rows, vocab, logits, targets, lse, dloss, dlogits)
        dh, dw = empty(rows, channels), empty(channels, vocab)
        K.gemm(rows * channels, 1, rows, channels, vocab, dlogits, 0, vocab, 0, w, 0, vocab, 1,
               dh, 0, channels, 1.0, 0.0)
        K.gemm(channels * vocab, 1, channels, vocab, rows, h, 0, channels, 1, dlogits, 0, vocab,
               0, dw, 0, vocab, 1.0, 0.0)
        dx, dg, db = layernorm_grad(x, g, mean, rstd, dh)
        return dx, dg, db, dw, None


def device_tensor(cpu):
    t = torch.empty(cpu.shape, dtype=cpu.dtype, device="cuda")
    t.copy_(cpu)
    return t


class Gpt:
    def __init__(self, vocab, d, heads, layers, context, gen):
        def param(*shape, scale=None, value=None):
            if value is not None:
                cpu = torch.full(shape, value, dtype=F32)
            else:
                cpu = torch.randn(*shape, generator=gen, dtype=F32) * scale
            return device_tensor(cpu).requires_grad_()

        self.heads = heads
        self.wte = param(vocab, d, scale=0.02)
        self.wpe = param(context, d, scale=0.01)
        self.blocks = []
        for _ in range(layers):
            self.blocks.append([
                param(d, value=1.0), param(d, value=0.0),
                param(d, 3 * d, scale=0.02), param(3 * d, value=0.0),
                param(d, d, scale=0.02 / math.sqrt(2 * layers)), param(d, value=0.0),
                param(d, value=1.0), param(d, value=0.0),
                param(d, 4 * d, scale=0.02), param(4 * d, value=0.0),
                param(4 * d, d, scale=0.02 / math.sqrt(2 * layers)), param(d, value=0.0)])
        self.gf, self.bf = param(d, value=1.0), param(d, value=0.0)
        self.head = param(d, vocab, scale=0.02)

    def parameters(self):
        out = [self.wte, self.wpe]
        for block in self.blocks:
            out += block
        return out + [self.gf, self.bf, self.head]

    def loss(self, idx, targets):
        batch, t_len = idx.shape
        x = Embedding.apply(idx, self.wte, self.wpe)
        for block in self.blocks:
            x = Block.apply(x, (batch, t_len, self.heads), *block)
        return HeadLoss.apply(x, self.gf, self.bf, self.head, targets)


class AdamW(torch.optim.Optimizer):
    """AdamW whose update runs in the project's kernel (PyTorch's fused and foreach
    implementations launch PyTorch's kernels)."""

    def __init__(self, params, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    for key in ("m", "v"):
                        state[key] = empty(*p.shape)
                        K.fill(p.numel(), state[key], 0.0)
                state["step"] += 1
                t = state["step"]
                K.adamw(p.numel(), p, p.grad, state["m"], state["v"], group["lr"], beta1, beta2,
                        group["eps"], group["weight_decay"], 1.0 - beta1 ** t, 1.0 - beta2 ** t)


def main():
    global K
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", default=os.environ.get("GPT_KERNELS_LIB",
                                                        os.path.join(HERE, "lib",
                                                                     "libgpt_kernels.so")))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()

    torch.cuda.init()
    K = Kernels(args.lib)
    gen = torch.Generator().manual_seed(0)
    model = Gpt(args.vocab, args.d, args.heads, args.layers, args.context, gen)
    opt = AdamW(model.parameters())
    data = torch.randint(0, args.vocab, (args.steps, args.batch, args.context + 1), generator=gen)
    one = device_tensor(torch.ones(1))
    losses, times = [], []
    for step in range(args.steps):
        batch = device_tensor(data[step])
        inputs = device_tensor(data[step, :, :-1].contiguous())
        targets = device_tensor(data[step, :, 1:].contiguous().reshape(-1))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model.loss(inputs, targets)
        opt.zero_grad(set_to_none=True)
        torch.autograd.backward(loss, grad_tensors=one)
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach().cpu()[0]))
        del batch
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
