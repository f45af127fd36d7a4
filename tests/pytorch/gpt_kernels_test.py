"""The training loop's kernels (tests/pytorch/gpt_kernels, driven by tests/gpu/gpt_train.py)
against PyTorch's CPU autograd: the loss and every parameter's gradient of a small model, and one
optimizer step against torch.optim.AdamW, agree within float32 rounding.

Usage: gpt_kernels_test.py LIBGPT_KERNELS   (MEMSIM_KERNELS names the host implementations on
the simulated driver)
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
import gpt_train  # noqa: E402

from harness import check, finish  # noqa: E402

VOCAB, D, HEADS, LAYERS, T, B = 64, 32, 4, 2, 8, 2


def reference_loss(p, idx, targets):
    """The same model with PyTorch's CPU operators."""
    wte, wpe = p[0], p[1]
    x = wte[idx] + wpe[: idx.shape[1]]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    for layer in range(LAYERS):
        g1, b1, wqkv, bqkv, wo, bo, g2, b2, w1, bm1, w2, bm2 = p[2 + 12 * layer: 14 + 12 * layer]
        h = F.layer_norm(x, (D,), g1, b1, eps=1e-5)
        q, k, v = (h @ wqkv + bqkv).split(D, dim=-1)
        q, k, v = (t.view(B, T, HEADS, D // HEADS).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D // HEADS)
        att = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
        x = x + att.transpose(1, 2).reshape(B, T, D) @ wo + bo
        h2 = F.layer_norm(x, (D,), g2, b2, eps=1e-5)
        x = x + F.gelu(h2 @ w1 + bm1, approximate="tanh") @ w2 + bm2
    gf, bf, head = p[-3:]
    logits = F.layer_norm(x, (D,), gf, bf, eps=1e-5) @ head
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets)


def close(a, b, tol=2e-4):
    scale = max(b.abs().max().item(), 1e-6)
    return (a - b).abs().max().item() / scale <= tol, (a - b).abs().max().item() / scale


def main():
    torch.cuda.init()
    gpt_train.K = gpt_train.Kernels(sys.argv[1])
    gen = torch.Generator().manual_seed(3)
    model = gpt_train.Gpt(VOCAB, D, HEADS, LAYERS, T, gen)
    data = torch.randint(0, VOCAB, (B, T + 1), generator=gen)
    idx, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous().reshape(-1)
    loss = model.loss(gpt_train.device_tensor(idx), gpt_train.device_tensor(targets))
    torch.autograd.backward(loss, grad_tensors=gpt_train.device_tensor(torch.ones(1)))

    cpu_params = [p.detach().cpu().clone().requires_grad_() for p in model.parameters()]
    want = reference_loss(cpu_params, idx, targets)
    want.backward()
    ok, err = close(loss.detach().cpu()[0], want.detach())
    check(ok, "loss equals PyTorch's CPU computation", "relative error %.2e" % err)
    worst = max(close(p.grad.cpu(), c.grad)[1] for p, c in zip(model.parameters(), cpu_params))
    check(worst <= 2e-4, "all %d parameter gradients equal PyTorch's CPU autograd" %
          len(cpu_params), "worst relative error %.2e" % worst)

    # The same gradients for both optimizers: with m and v starting at 0 the first update is
    # about lr * sign(g), which turns rounding noise in near-zero gradients into lr-sized steps.
    for p, c in zip(model.parameters(), cpu_params):
        p.grad.copy_(c.grad)
    opt = gpt_train.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    ref_opt = torch.optim.AdamW(cpu_params, lr=1e-2, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.1)
    for _ in range(2):
        opt.step()
        ref_opt.step()
    worst = max(close(p.detach().cpu(), c.detach())[1]
                for p, c in zip(model.parameters(), cpu_params))
    check(worst <= 1e-5, "two AdamW steps equal torch.optim.AdamW's", "worst %.2e" % worst)
    finish()


if __name__ == "__main__":
    main()
