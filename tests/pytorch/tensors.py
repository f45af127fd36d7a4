"""Test data shared by the PyTorch tests: deterministic patterns built on the CPU, and device
copies of them made with PyTorch's own copy (the only device work these tests need)."""
import torch


def pattern(numel, seed):
    """A deterministic int32 pattern, different for every seed."""
    x = torch.arange(numel, dtype=torch.int64)
    return ((x * 2654435761 + seed * 40503) % (1 << 31)).to(torch.int32)


def to_device(cpu, device="cuda"):
    """A new device tensor holding a copy of `cpu` (copy_, so no PyTorch kernel runs)."""
    t = torch.empty(cpu.shape, dtype=cpu.dtype, device=device)
    t.copy_(cpu)
    return t
