#include "address_space.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>

#include "populate.h"

namespace memsim {

namespace {

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

// A non-empty range that starts and ends on granule boundaries.
bool IsGranuleRange(uint64_t ptr, uint64_t size) {
  return size != 0 && ptr % kGranularity == 0 && size % kGranularity == 0;
}

// The sparse memfd backing classic allocations (Note [ipc backing] in ipc.h); -1 if the system
// refuses one (classic memory is then anonymous and cannot be exported).
int CreateClassicFile(uint64_t size) {
  const int fd = memfd_create("memsim-device-memory", MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

std::unique_ptr<AddressSpace> AddressSpace::Create(uint64_t va_size) {
  for (uint64_t size = RoundUp(va_size, kGranularity); size >= (1ULL << 30); size /= 2) {
    void* p = mmap(nullptr, size + kGranularity, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) continue;
    const uint64_t raw = reinterpret_cast<uint64_t>(p);
    const uint64_t aligned = RoundUp(raw, kGranularity);
    if (aligned > raw) munmap(p, aligned - raw);
    const uint64_t tail = raw + size + kGranularity - (aligned + size);
    if (tail > 0) munmap(reinterpret_cast<void*>(aligned + size), tail);
    return std::unique_ptr<AddressSpace>(new AddressSpace(aligned, size, CreateClassicFile(size)));
  }
  return nullptr;
}

AddressSpace::AddressSpace(uint64_t base, uint64_t size, int classic_fd)
    : base_(base), size_(size), classic_fd_(classic_fd), ranges_(base, size) {}

AddressSpace::~AddressSpace() {
  munmap(reinterpret_cast<void*>(base_), size_);
  if (classic_fd_ >= 0) close(classic_fd_);
}

bool AddressSpace::ResetToNone(uint64_t ptr, uint64_t size) {
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  return p != MAP_FAILED;
}

CUresult AddressSpace::Reserve(uint64_t size, uint64_t alignment, uint64_t hint, uint64_t* out) {
  if (size == 0 || size % kGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment == 0) alignment = kGranularity;
  if (alignment % kGranularity != 0 || (alignment & (alignment - 1)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto start = ranges_.Allocate(size, alignment, Contains(hint) ? hint : 0);
  if (!start) return CUDA_ERROR_OUT_OF_MEMORY;
  reservations_.emplace(*start, Reservation{size});
  *out = *start;
  return CUDA_SUCCESS;
}

CUresult AddressSpace::FreeReservation(uint64_t ptr, uint64_t size,
                                       std::vector<std::shared_ptr<Physical>>* dropped) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reservations_.find(ptr);
  if (it == reservations_.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
  // Note [implicit unmap]: mappings left in a freed reservation are unmapped here instead of
  // leaking address space; the physical allocations stay alive while handles remain.
  for (auto m = mappings_.lower_bound(ptr); m != mappings_.end() && m->first < ptr + size;) {
    dropped->push_back(std::move(m->second.phys));
    m = mappings_.erase(m);
  }
  ResetToNone(ptr, size);
  reservations_.erase(it);
  ranges_.Free(ptr, size);
  return CUDA_SUCCESS;
}

const AddressSpace::Reservation* AddressSpace::ReservationContaining(uint64_t ptr, uint64_t size,
                                                                     uint64_t* start) const {
  auto it = reservations_.upper_bound(ptr);
  if (it == reservations_.begin()) return nullptr;
  --it;
  if (ptr + size > it->first + it->second.size || ptr + size < ptr) return nullptr;
  *start = it->first;
  return &it->second;
}

CUresult AddressSpace::Map(uint64_t ptr, uint64_t size, uint64_t offset,
                           std::shared_ptr<Physical> phys) {
  if (size == 0 || ptr % kGranularity != 0 || size % kGranularity != 0 ||
      offset % kGranularity != 0 || offset > phys->size() || size > phys->size() - offset) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t res_start;
  if (ReservationContaining(ptr, size, &res_start) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Refuse overlap with an existing mapping.
  auto next = mappings_.lower_bound(ptr);
  if (next != mappings_.end() && next->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  if (next != mappings_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > ptr) return CUDA_ERROR_INVALID_VALUE;
  }
  // A mapping of the whole allocation waits for its parked page tables (Note [deferred
  // mappings]); the range is already anonymous PROT_NONE.
  const bool deferred = offset == 0 && size == phys->size() && phys->parked();
  if (!deferred) {
    void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                   phys->fd(), static_cast<off_t>(offset));
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const uint64_t map_id = NextAllocationId();
  mappings_.emplace(
      ptr, Mapping{size, std::move(phys), offset, PROT_NONE, 0, 0, map_id, ptr, size, deferred});
  return CUDA_SUCCESS;
}

AddressSpace::Realized AddressSpace::Realize(uint64_t addr, Mapping* m, int prot) {
  Realized how = Realized::kMoved;
  if (m->offset != 0 || m->size != m->phys->size() || !m->phys->Unpark(addr, prot)) {
    void* p = mmap(reinterpret_cast<void*>(addr), m->size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                   m->phys->fd(), static_cast<off_t>(m->offset));
    if (p == MAP_FAILED) {
      ResetToNone(addr, m->size);  // Unpark may have left a mapping there
      return Realized::kFailed;
    }
    how = Realized::kMapped;
  }
  m->deferred = false;
  return how;
}

bool AddressSpace::MappedContiguously(uint64_t ptr, uint64_t size, int need_prot) const {
  auto it = mappings_.upper_bound(ptr);
  if (it == mappings_.begin()) return false;
  --it;
  uint64_t cursor = ptr;
  const uint64_t end = ptr + (size == 0 ? 1 : size);
  while (cursor < end) {
    if (it == mappings_.end() || it->first > cursor) return false;
    if (it->first + it->second.size <= cursor) return false;
    if ((it->second.prot & need_prot) != need_prot) return false;
    cursor = it->first + it->second.size;
    ++it;
  }
  return true;
}

void AddressSpace::SplitAt(uint64_t addr) {
  auto it = mappings_.upper_bound(addr);
  if (it == mappings_.begin()) return;
  --it;
  if (it->first == addr || it->first + it->second.size <= addr) return;
  Mapping tail = it->second;
  const uint64_t head_size = addr - it->first;
  tail.size -= head_size;
  tail.offset += head_size;
  it->second.size = head_size;
  mappings_.emplace(addr, std::move(tail));
}

bool AddressSpace::IsolateMappedRange(uint64_t ptr, uint64_t size) {
  if (!MappedContiguously(ptr, size, 0)) return false;
  SplitAt(ptr);
  SplitAt(ptr + size);
  return true;
}

CUresult AddressSpace::Unmap(uint64_t ptr, uint64_t size,
                             std::vector<std::shared_ptr<Physical>>* dropped) {
  if (!IsGranuleRange(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(mu_);
  if (!MappedContiguously(ptr, size, 0)) return CUDA_ERROR_INVALID_VALUE;
  // Documented: "cuMemUnmap cannot unmap a sub-range of an address range mapped by cuMemMap".
  auto first = std::prev(mappings_.upper_bound(ptr));
  for (auto it = first; it != mappings_.end() && it->first < ptr + size; ++it) {
    const Mapping& m = it->second;
    if (m.map_base < ptr || m.map_base + m.map_size > ptr + size) return CUDA_ERROR_INVALID_VALUE;
  }
  for (auto it = mappings_.lower_bound(ptr); it != mappings_.end() && it->first < ptr + size;) {
    const Mapping& m = it->second;
    // Keeps the page tables of a whole-allocation mapping for its next cuMemMap (Note [parked
    // mappings]); whatever the result, ResetToNone below replaces what is left at the address.
    if (!m.deferred && m.offset == 0 && m.size == m.phys->size()) m.phys->Park(it->first, m.prot);
    dropped->push_back(std::move(it->second.phys));
    it = mappings_.erase(it);
  }
  if (!ResetToNone(ptr, size)) return CUDA_ERROR_UNKNOWN;
  return CUDA_SUCCESS;
}

CUresult AddressSpace::SetAccess(uint64_t ptr, uint64_t size, const AccessChange& change) {
  if (!IsGranuleRange(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(mu_);
  if (!IsolateMappedRange(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
  for (auto it = mappings_.lower_bound(ptr); it != mappings_.end() && it->first < ptr + size;
       ++it) {
    Mapping& m = it->second;
    const uint32_t readers = (m.readers & ~change.devices) | change.readers;
    const uint32_t writers = (m.writers & ~change.devices) | change.writers;
    int prot = change.host_prot;
    if (readers != 0) prot |= PROT_READ;
    if (writers != 0) prot |= PROT_READ | PROT_WRITE;
    const Realized how =
        m.deferred && prot != PROT_NONE ? Realize(it->first, &m, prot) : Realized::kMapped;
    // A failure leaves the pieces before this one with their new access (a partial call).
    if (how == Realized::kFailed) return CUDA_ERROR_OUT_OF_MEMORY;
    if (how == Realized::kMapped) {
      if (prot != m.prot && mprotect(reinterpret_cast<void*>(it->first), m.size, prot) != 0) {
        return CUDA_ERROR_UNKNOWN;
      }
      // Fresh mappings get their page tables now (Note [committed at allocation]).
      if (prot != PROT_NONE) PopulateRange(it->first, m.size, /*write=*/false);
    }
    m.prot = prot;
    m.readers = readers;
    m.writers = writers;
  }
  return CUDA_SUCCESS;
}

uint64_t AddressSpace::ClassicFootprint(uint64_t size) { return RoundUp(size, kPageSize); }

CUresult AddressSpace::AllocClassic(uint64_t size, void* owner, CUmemoryPool pool, uint64_t* out) {
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t footprint = ClassicFootprint(size);
  const uint64_t alignment = footprint >= kGranularity ? kGranularity : kPageSize;
  uint64_t start = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto range = ranges_.Allocate(footprint, alignment);
    if (!range) return CUDA_ERROR_OUT_OF_MEMORY;
    start = *range;
  }
  // Outside the lock: the range is ours and no other thread knows it yet.
  if (!BackClassic(start, footprint)) {
    std::lock_guard<std::mutex> lock(mu_);
    ranges_.Free(start, footprint);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard<std::mutex> lock(mu_);
  classic_.emplace(start, Classic{size, footprint, owner, pool, NextAllocationId(), false});
  *out = start;
  return CUDA_SUCCESS;
}

bool AddressSpace::BackClassic(uint64_t start, uint64_t footprint) {
  void* p = MAP_FAILED;
  if (classic_fd_ < 0) {
    p = mmap(reinterpret_cast<void*>(start), footprint, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  } else if (AllocateFilePages(classic_fd_, start - base_, footprint)) {
    p = mmap(reinterpret_cast<void*>(start), footprint, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_FIXED, classic_fd_, static_cast<off_t>(start - base_));
  }
  if (p == MAP_FAILED) {
    ResetToNone(start, footprint);
    ReleaseClassicPages(start, footprint);
    return false;
  }
  PopulateRange(start, footprint, /*write=*/true);  // Note [committed at allocation]
  return true;
}

void AddressSpace::ReleaseClassicPages(uint64_t start, uint64_t footprint) {
  if (classic_fd_ < 0) return;
  fallocate(classic_fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
            static_cast<off_t>(start - base_), static_cast<off_t>(footprint));
}

CUresult AddressSpace::FreeClassic(uint64_t ptr, uint64_t* footprint, CUmemoryPool* pool) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = classic_.find(ptr);
  if (it == classic_.end()) return CUDA_ERROR_INVALID_VALUE;
  const bool imported = it->second.imported;
  *footprint = imported ? 0 : it->second.footprint;  // imported memory was not charged
  if (pool != nullptr) *pool = it->second.pool;
  ResetToNone(ptr, it->second.footprint);
  // The pages go back to the system (another process may still map them: undefined, as on
  // a GPU when the exporter frees before the importer closes).
  if (!imported) ReleaseClassicPages(ptr, it->second.footprint);
  ranges_.Free(ptr, it->second.footprint);
  classic_.erase(it);
  return CUDA_SUCCESS;
}

CUresult AddressSpace::MapImported(int fd, uint64_t offset, uint64_t size, void* owner,
                                   uint64_t* out) {
  if (size == 0 || offset % kPageSize != 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t footprint = ClassicFootprint(size);
  const uint64_t alignment = footprint >= kGranularity ? kGranularity : kPageSize;
  std::lock_guard<std::mutex> lock(mu_);
  auto start = ranges_.Allocate(footprint, alignment);
  if (!start) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = mmap(reinterpret_cast<void*>(*start), footprint, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_FIXED, fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) {
    ResetToNone(*start, footprint);
    ranges_.Free(*start, footprint);
    return CUDA_ERROR_MAP_FAILED;
  }
  classic_.emplace(*start, Classic{size, footprint, owner, nullptr, NextAllocationId(), true});
  *out = *start;
  return CUDA_SUCCESS;
}

std::vector<uint64_t> AddressSpace::ClassicOwnedBy(const void* owner) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> out;
  for (const auto& [start, c] : classic_) {
    if (c.owner == owner) out.push_back(start);
  }
  return out;
}

bool AddressSpace::IsAccessible(uint64_t addr, uint64_t size, bool write) {
  std::lock_guard<std::mutex> lock(mu_);
  auto c = classic_.upper_bound(addr);
  if (c != classic_.begin()) {
    --c;
    if (addr < c->first + c->second.footprint) {
      return addr + size <= c->first + c->second.footprint && addr + size >= addr;
    }
  }
  return MappedContiguously(addr, size, write ? (PROT_READ | PROT_WRITE) : PROT_READ);
}

bool AddressSpace::DeniesDevice(uint64_t addr, uint64_t size, int ordinal, bool write) {
  const uint32_t bit = 1u << ordinal;
  const uint64_t end = addr + (size == 0 ? 1 : size);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = mappings_.upper_bound(addr);
  if (it != mappings_.begin()) --it;
  for (; it != mappings_.end() && it->first < end; ++it) {
    const Mapping& m = it->second;
    if (it->first + m.size <= addr || m.prot == PROT_NONE) continue;
    if ((write ? m.writers : m.readers | m.writers) & bit) continue;
    return true;
  }
  return false;
}

uint64_t AddressSpace::HostBackedBytes(uint64_t addr, uint64_t size) {
  const uint64_t end = addr + size;
  uint64_t bytes = 0;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = mappings_.upper_bound(addr);
  if (it != mappings_.begin()) --it;
  for (; it != mappings_.end() && it->first < end; ++it) {
    const uint64_t piece_end = it->first + it->second.size;
    if (piece_end <= addr || it->second.phys->device_located()) continue;
    bytes += std::min(piece_end, end) - std::max(it->first, addr);
  }
  return bytes;
}

std::optional<RangeInfo> AddressSpace::Lookup(uint64_t addr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto c = classic_.upper_bound(addr);
  if (c != classic_.begin()) {
    --c;
    if (addr < c->first + c->second.footprint) {
      RangeInfo info;
      info.kind = RangeInfo::Kind::kClassic;
      info.base = c->first;
      info.size = c->second.size;
      info.buffer_id = c->second.buffer_id;
      info.owner = c->second.owner;
      info.pool = c->second.pool;
      info.imported = c->second.imported;
      info.prot = PROT_READ | PROT_WRITE;
      return info;
    }
  }
  auto m = mappings_.upper_bound(addr);
  if (m != mappings_.begin()) {
    --m;
    if (addr < m->first + m->second.size) {
      RangeInfo info;
      info.kind = RangeInfo::Kind::kMapped;
      info.base = m->second.map_base;
      info.size = m->second.map_size;
      info.buffer_id = m->second.map_id;
      info.prot = m->second.prot;
      info.readers = m->second.readers;
      info.writers = m->second.writers;
      info.physical = m->second.phys;
      uint64_t res_start = 0;
      if (const Reservation* r = ReservationContaining(addr, 1, &res_start)) {
        info.reservation_base = res_start;
        info.reservation_size = r->size;
      }
      return info;
    }
  }
  uint64_t res_start;
  if (const Reservation* r = ReservationContaining(addr, 1, &res_start)) {
    RangeInfo info;
    info.kind = RangeInfo::Kind::kReserved;
    info.base = res_start;
    info.size = r->size;
    return info;
  }
  return std::nullopt;
}

}  // namespace memsim
