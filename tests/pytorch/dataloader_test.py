"""A torch.utils.data.DataLoader with worker processes (fork and spawn) in a process running
under libmemshim.so: the workers never touch CUDA, the main process moves every batch to the
device, and the batches arrive intact."""
import multiprocessing
import sys

import torch
from torch.utils.data import DataLoader, Dataset

from harness import check, finish


class Pattern(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.arange(4096, dtype=torch.int64) * 7 + i


def main():
    torch.cuda.init()  # the parent has a live CUDA context before the workers start
    for method in ("fork", "spawn"):
        loader = DataLoader(Pattern(), batch_size=8, num_workers=2,
                            multiprocessing_context=multiprocessing.get_context(method))
        total = torch.zeros(4096, dtype=torch.int64)
        batches = 0
        for batch in loader:
            on_device = batch.to("cuda", non_blocking=False)
            total += on_device.cpu().sum(dim=0)
            batches += 1
        want = sum(torch.arange(4096, dtype=torch.int64) * 7 + i for i in range(64))
        check(batches == 8 and torch.equal(total, want), "DataLoader workers (%s)" % method)
    finish()


if __name__ == "__main__":
    sys.exit(main())
