// Committing memory when it is allocated, as a GPU driver does.
//
// Note [committed at allocation]: device memory (cuMemAlloc, pools, cuMemCreate) and pinned host
// memory are resident once the allocating call returns on a GPU; the first copy into them runs
// at link speed. Fresh anonymous or memfd pages of the host are instead materialized on first
// touch, one page fault per 4 KiB page (17 us each on the virtualized build machine), which made
// the first copy of 64 MiB at a modelled 2 GB/s take about 250 ms instead of 33 ms. The sim
// therefore allocates the pages (fallocate for memfds) and fills the page tables
// (MADV_POPULATE_WRITE / _READ, Linux 5.14; older kernels touch every page) when memory is
// allocated, and again when a fresh mapping of a physical allocation is granted access.
//
// Thread safety: thread-safe (stateless).
#ifndef MEMSIM_SRC_POPULATE_H_
#define MEMSIM_SRC_POPULATE_H_

#include <cstdint>

namespace memsim {

// Fills the page tables of [addr, addr + size) (page-aligned), mapped with at least PROT_READ.
// `write` (REQUIRES: PROT_WRITE, and no other thread uses the range yet) for private anonymous
// memory, whose read faults would only map the shared zero page; shared file mappings need
// only a read population (their entries are writable when the mapping is). Best effort: memory
// stays usable (it is faulted in on first touch) if the kernel refuses.
void PopulateRange(uint64_t addr, uint64_t size, bool write);

// Allocates the pages of [offset, offset + size) of the file `fd`. False when the memory is not
// available (the caller reports CUDA_ERROR_OUT_OF_MEMORY instead of a later SIGBUS on touch).
bool AllocateFilePages(int fd, uint64_t offset, uint64_t size);

}  // namespace memsim

#endif  // MEMSIM_SRC_POPULATE_H_
