// The virtual address space of one simulated device and everything mapped into it.
//
// Note [device addresses are host addresses]: kernels are host functions that dereference
// device pointers directly, so a CUdeviceptr is a real virtual address of this process. Each
// device owns one large mmap(PROT_NONE) region. cuMemAddressReserve and cuMemAlloc carve
// ranges out of it; cuMemMap maps a physical allocation's memfd pages at MAP_FIXED but keeps
// them PROT_NONE until cuMemSetAccess grants access (mprotect); cuMemUnmap puts anonymous
// PROT_NONE pages back. Access rights are therefore enforced by the MMU: touching unmapped or
// no-access memory faults (see fault_guard.h). cuMemAlloc ranges are read-write pages,
// page-granular, of one sparse memfd per device at the range's offset in the region (Note [ipc
// backing] in ipc.h), so that another process can map them (legacy IPC).
//
// Note [deferred mappings]: a cuMemMap of a whole physical allocation whose previous mapping
// is parked (Note [parked mappings] in physical.h) does not mmap at once: the range stays
// anonymous PROT_NONE, which faults exactly as a PROT_NONE mapping of the allocation would,
// and the first cuMemSetAccess granting access moves the parked page tables there with that
// protection. (Mapping at once and changing the protection later would drop the entries the
// move kept.) A failure of that realization is reported by cuMemSetAccess
// (CUDA_ERROR_OUT_OF_MEMORY) instead of cuMemMap.
//
// Thread safety: thread-safe (one mutex per address space). Physical allocations dropped by
// Unmap/FreeReservation are returned to the caller so their destruction (which releases
// capacity) happens outside the lock.
#ifndef MEMSIM_SRC_ADDRESS_SPACE_H_
#define MEMSIM_SRC_ADDRESS_SPACE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "cuda_api.h"
#include "physical.h"
#include "range_allocator.h"

namespace memsim {

inline constexpr uint64_t kGranularity = 2ULL << 20;  // VMM minimum and recommended
inline constexpr uint64_t kPageSize = 4096;

// Note [per-device access]: cuMemSetAccess grants access per location. All simulated devices
// share this process's memory, so the MMU protection of a mapping is the widest access any
// device (or the host descriptors of the last call) holds; which devices hold it is recorded per
// mapping, and device work of a device without access (kernel arguments pointing there, copies
// and memsets) is refused at execution with the sticky CUDA_ERROR_ILLEGAL_ADDRESS, as the GPU's
// MMU would fault (device_access.h). Devices not named in a cuMemSetAccess call keep their
// access. Host access is not tracked separately: it is what the MMU grants.
struct AccessChange {
  uint32_t devices = 0;  // bit per device ordinal named by the descriptors
  uint32_t readers = 0;  // of those, the ones granted read access
  uint32_t writers = 0;  // ... and read-write access
  int host_prot = 0;     // PROT_* asked for by host-location descriptors
};

// What a device address belongs to (for pointer attributes and address-range queries).
struct RangeInfo {
  enum class Kind { kClassic, kMapped, kReserved };
  Kind kind = Kind::kReserved;
  uint64_t base = 0;              // classic: allocation start; mapped: start of its cuMemMap range
  uint64_t size = 0;              // requested allocation size / size of the cuMemMap range
  uint64_t reservation_base = 0;  // mapped: the cuMemAddressReserve range containing it
  uint64_t reservation_size = 0;
  uint64_t buffer_id = 0;
  void* owner = nullptr;               // classic: owning context
  CUmemoryPool pool = nullptr;         // classic allocations from a memory pool
  bool imported = false;               // classic: opened with cuIpcOpenMemHandle
  int prot = 0;                        // PROT_* currently granted (the MMU's)
  uint32_t readers = 0;                // mapped: devices with read access (bit per ordinal)
  uint32_t writers = 0;                // mapped: devices with read-write access
  std::shared_ptr<Physical> physical;  // mapped only
};

class AddressSpace {
 public:
  // Reserves up to `va_size` bytes of address space (less if the OS refuses; at least 1 GiB).
  // nullptr when no region could be reserved.
  static std::unique_ptr<AddressSpace> Create(uint64_t va_size);
  ~AddressSpace();
  AddressSpace(const AddressSpace&) = delete;
  AddressSpace& operator=(const AddressSpace&) = delete;

  bool Contains(uint64_t addr) const { return addr >= base_ && addr < base_ + size_; }
  uint64_t base() const { return base_; }
  uint64_t size() const { return size_; }

  // --- cuMemAddressReserve / cuMemAddressFree ---------------------------------------------
  // REQUIRES: size and alignment are multiples of kGranularity (alignment 0 = granularity).
  CUresult Reserve(uint64_t size, uint64_t alignment, uint64_t hint, uint64_t* out);
  // The range must be exactly one reservation. Mappings still inside are dropped (returned).
  CUresult FreeReservation(uint64_t ptr, uint64_t size,
                           std::vector<std::shared_ptr<Physical>>* dropped);

  // --- cuMemMap / cuMemUnmap / cuMemSetAccess ----------------------------------------------
  // REQUIRES: ptr, size, offset multiples of kGranularity. The range must be inside one
  // reservation and wholly unmapped; [offset, offset + size) inside the physical allocation.
  CUresult Map(uint64_t ptr, uint64_t size, uint64_t offset, std::shared_ptr<Physical> phys);
  // The range must be entirely mapped (it may span several cuMemMap ranges).
  CUresult Unmap(uint64_t ptr, uint64_t size, std::vector<std::shared_ptr<Physical>>* dropped);
  // The range must be entirely mapped. Applies `change` (Note [per-device access]).
  CUresult SetAccess(uint64_t ptr, uint64_t size, const AccessChange& change);

  // --- cuMemAlloc / cuMemFree ---------------------------------------------------------------
  // Reserves and backs a read-write range; *charged is set to the bytes the caller must charge
  // (page-rounded). The caller charges capacity BEFORE calling (use ClassicFootprint()).
  static uint64_t ClassicFootprint(uint64_t size);
  CUresult AllocClassic(uint64_t size, void* owner, CUmemoryPool pool, uint64_t* out);
  // ptr must be the start of a classic allocation; *footprint gets the bytes to uncharge.
  CUresult FreeClassic(uint64_t ptr, uint64_t* footprint, CUmemoryPool* pool = nullptr);
  std::vector<uint64_t> ClassicOwnedBy(const void* owner);

  // --- legacy IPC (ipc.h) ------------------------------------------------------------------
  // The memfd backing classic allocations (-1 when none could be created: no IPC) and the
  // offset of `addr` in it.
  int classic_fd() const { return classic_fd_; }
  uint64_t FileOffset(uint64_t addr) const { return addr - base_; }
  // Maps [offset, offset + size) of `fd` (another process's classic memory) read-write as a
  // classic range marked imported; it charges nothing. FreeClassic removes it.
  CUresult MapImported(int fd, uint64_t offset, uint64_t size, void* owner, uint64_t* out);

  // --- queries ------------------------------------------------------------------------------
  // True when every byte of [addr, addr + size) is backed and grants read (and write if
  // `write`) access. size 0 checks addr alone.
  bool IsAccessible(uint64_t addr, uint64_t size, bool write);
  // True when some mapping in [addr, addr + size) (size 0: addr alone) is accessible to the
  // MMU but not to device `ordinal` (read access; read-write when `write`).
  bool DeniesDevice(uint64_t addr, uint64_t size, int ordinal, bool write);
  // Bytes of [addr, addr + size) mapped to host-located physical memory (HOST, HOST_NUMA):
  // memory a device reaches across its link (Note [host-backed transfers] in link_charge.h).
  uint64_t HostBackedBytes(uint64_t addr, uint64_t size);
  std::optional<RangeInfo> Lookup(uint64_t addr);

 private:
  struct Reservation {
    uint64_t size;
  };
  struct Mapping {  // one piece of a cuMemMap range (split by partial SetAccess/Unmap)
    uint64_t size;
    std::shared_ptr<Physical> phys;
    uint64_t offset;
    int prot;
    uint32_t readers;  // Note [per-device access]
    uint32_t writers;
    uint64_t map_id;
    uint64_t map_base;  // extent of the original cuMemMap call
    uint64_t map_size;
    bool deferred;  // nothing mmapped yet: the range is anonymous PROT_NONE (prot is 0)
  };
  struct Classic {
    uint64_t size;       // requested
    uint64_t footprint;  // page-rounded, what is mapped and charged
    void* owner;
    CUmemoryPool pool;
    uint64_t buffer_id;
    bool imported;  // footprint is not charged; the file is another process's
  };

  AddressSpace(uint64_t base, uint64_t size, int classic_fd);

  // REQUIRES: mu_ held.
  bool MappedContiguously(uint64_t ptr, uint64_t size, int need_prot) const;
  void SplitAt(uint64_t addr);
  // Splits pieces so that [ptr, ptr+size) starts and ends on piece boundaries;
  // false (nothing changed) unless the range is mapped contiguously.
  bool IsolateMappedRange(uint64_t ptr, uint64_t size);
  // Maps and commits a classic range (REQUIRES: allocated from ranges_, mu_ NOT held); false
  // (nothing left mapped or allocated) when the memory is not available.
  bool BackClassic(uint64_t start, uint64_t footprint);
  // Returns the file pages of a classic range to the system.
  void ReleaseClassicPages(uint64_t start, uint64_t footprint);
  const Reservation* ReservationContaining(uint64_t ptr, uint64_t size, uint64_t* start) const;
  bool ResetToNone(uint64_t ptr, uint64_t size);
  // Realizes a deferred piece (Note [deferred mappings]): kMoved when its parked page tables
  // were moved there with protection `prot`, kMapped when it was mapped afresh (PROT_NONE: the
  // caller grants `prot`), kFailed (nothing mapped) when neither worked.
  enum class Realized { kMoved, kMapped, kFailed };
  Realized Realize(uint64_t addr, Mapping* m, int prot);

  const uint64_t base_;
  const uint64_t size_;
  const int classic_fd_;
  std::mutex mu_;
  RangeAllocator ranges_;
  std::map<uint64_t, Reservation> reservations_;  // VMM reservations by start
  std::map<uint64_t, Mapping> mappings_;          // pieces by start
  std::map<uint64_t, Classic> classic_;           // cuMemAlloc ranges by start
};

}  // namespace memsim

#endif  // MEMSIM_SRC_ADDRESS_SPACE_H_
