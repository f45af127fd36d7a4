#include "node_capacity.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace memsim {

namespace {

constexpr uint32_t kMagic = 0x4d53494d;  // "MSIM"
constexpr uint32_t kVersion = 1;
constexpr int kMaxDevices = 16;
constexpr int kMaxProcesses = 256;

struct ProcessUsage {
  int32_t pid;  // 0 = free slot
  uint64_t bytes;
};

struct DeviceRecord {
  pthread_mutex_t mutex;  // process-shared, robust
  uint64_t capacity;      // 0 = record not initialized yet
  uint64_t used;
  ProcessUsage procs[kMaxProcesses];
};

}  // namespace

struct NodeSegment {
  std::atomic<uint32_t> state;  // 0 = fresh, 1 = initializing, 2 = ready
  uint32_t magic;
  uint32_t version;
  DeviceRecord devices[kMaxDevices];
};

namespace {

// Note [segment initialization]: shm_open(O_CREAT) + ftruncate is idempotent, and a fresh
// segment reads as zeros, so the first process to move `state` from 0 to 1 initializes the
// mutexes while the others spin until it publishes 2. No file rename or lock file is needed.
NodeSegment* MapSegment(const std::string& node) {
  const std::string name = "/memsim-" + node;
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return nullptr;
  struct stat st;
  if (fstat(fd, &st) != 0 || (st.st_size < static_cast<off_t>(sizeof(NodeSegment)) &&
                              ftruncate(fd, sizeof(NodeSegment)) != 0)) {
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, sizeof(NodeSegment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return nullptr;
  auto* seg = static_cast<NodeSegment*>(p);
  uint32_t expected = 0;
  if (seg->state.compare_exchange_strong(expected, 1)) {
    for (DeviceRecord& d : seg->devices) {
      pthread_mutexattr_t attr;
      pthread_mutexattr_init(&attr);
      pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
      pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
      pthread_mutex_init(&d.mutex, &attr);
      pthread_mutexattr_destroy(&attr);
    }
    seg->magic = kMagic;
    seg->version = kVersion;
    seg->state.store(2, std::memory_order_release);
  } else {
    while (seg->state.load(std::memory_order_acquire) != 2) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, nullptr);
    }
  }
  if (seg->magic != kMagic || seg->version != kVersion) {
    munmap(p, sizeof(NodeSegment));
    return nullptr;
  }
  return seg;
}

class RecordLock {
 public:
  explicit RecordLock(DeviceRecord* d) : d_(d) {
    if (pthread_mutex_lock(&d_->mutex) == EOWNERDEAD) {
      // A holder died mid-update: the counters are recomputed from the per-pid table.
      uint64_t sum = 0;
      for (const ProcessUsage& p : d_->procs) sum += p.pid != 0 ? p.bytes : 0;
      d_->used = sum;
      pthread_mutex_consistent(&d_->mutex);
    }
  }
  ~RecordLock() { pthread_mutex_unlock(&d_->mutex); }
  RecordLock(const RecordLock&) = delete;
  RecordLock& operator=(const RecordLock&) = delete;

 private:
  DeviceRecord* d_;
};

bool PidAlive(int32_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

// REQUIRES: the record's mutex is held.
void ReapDead(DeviceRecord* d) {
  for (ProcessUsage& p : d->procs) {
    if (p.pid != 0 && !PidAlive(p.pid)) {
      d->used -= p.bytes;
      p = ProcessUsage{0, 0};
    }
  }
}

// REQUIRES: the record's mutex is held. nullptr when the table is full.
ProcessUsage* SlotFor(DeviceRecord* d, int32_t pid, bool create) {
  ProcessUsage* free_slot = nullptr;
  for (ProcessUsage& p : d->procs) {
    if (p.pid == pid) return &p;
    if (p.pid == 0 && free_slot == nullptr) free_slot = &p;
  }
  if (!create || free_slot == nullptr) return nullptr;
  *free_slot = ProcessUsage{pid, 0};
  return free_slot;
}

// Records of this process, released at normal exit (see Note [exit] in Open).
std::mutex g_open_mu;
std::vector<DeviceRecord*>* g_open_records = nullptr;

void ReleaseUsageOfThisProcess(DeviceRecord* d) {
  RecordLock lock(d);
  if (ProcessUsage* slot = SlotFor(d, getpid(), false)) {
    d->used -= slot->bytes;
    *slot = ProcessUsage{0, 0};
  }
}

void ReleaseAllAtExit() {
  std::lock_guard<std::mutex> lock(g_open_mu);
  if (g_open_records == nullptr) return;
  for (DeviceRecord* d : *g_open_records) ReleaseUsageOfThisProcess(d);
}

}  // namespace

std::unique_ptr<NodeCapacity> NodeCapacity::Open(const std::string& node, int ordinal,
                                                 uint64_t capacity) {
  if (ordinal < 0 || ordinal >= kMaxDevices || node.empty() ||
      node.find('/') != std::string::npos) {
    return nullptr;
  }
  NodeSegment* seg = MapSegment(node);
  if (seg == nullptr) return nullptr;
  DeviceRecord* d = &seg->devices[ordinal];
  uint64_t effective;
  {
    RecordLock lock(d);
    if (d->capacity == 0) d->capacity = capacity;
    effective = d->capacity;
  }
  // Note [exit]: the driver lives until the process ends, so a normally exiting process gives
  // its usage back from an atexit handler; a killed one is reaped by the survivors.
  {
    std::lock_guard<std::mutex> lock(g_open_mu);
    if (g_open_records == nullptr) {
      g_open_records = new std::vector<DeviceRecord*>();
      std::atexit(ReleaseAllAtExit);
    }
    g_open_records->push_back(d);
  }
  return std::unique_ptr<NodeCapacity>(new NodeCapacity(seg, ordinal, effective));
}

NodeCapacity::NodeCapacity(NodeSegment* segment, int ordinal, uint64_t capacity)
    : segment_(segment), ordinal_(ordinal), capacity_(capacity) {}

NodeCapacity::~NodeCapacity() {
  // Usage is per process: the last handle of this process on the record gives it back.
  DeviceRecord* d = &segment_->devices[ordinal_];
  bool last = true;
  {
    std::lock_guard<std::mutex> lock(g_open_mu);
    if (g_open_records != nullptr) {
      auto& v = *g_open_records;
      auto it = std::find(v.begin(), v.end(), d);
      if (it != v.end()) v.erase(it);
      last = std::find(v.begin(), v.end(), d) == v.end();
    }
  }
  if (last) ReleaseUsageOfThisProcess(d);
}

bool NodeCapacity::TryCharge(uint64_t bytes) {
  DeviceRecord* d = &segment_->devices[ordinal_];
  RecordLock lock(d);
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (bytes <= d->capacity && d->used <= d->capacity - bytes) {
      ProcessUsage* slot = SlotFor(d, getpid(), true);
      if (slot == nullptr) return false;
      slot->bytes += bytes;
      d->used += bytes;
      return true;
    }
    ReapDead(d);
  }
  return false;
}

void NodeCapacity::Release(uint64_t bytes) {
  DeviceRecord* d = &segment_->devices[ordinal_];
  RecordLock lock(d);
  ProcessUsage* slot = SlotFor(d, getpid(), false);
  if (slot == nullptr) return;
  const uint64_t give = bytes < slot->bytes ? bytes : slot->bytes;
  slot->bytes -= give;
  d->used -= give;
  if (slot->bytes == 0) *slot = ProcessUsage{0, 0};
}

uint64_t NodeCapacity::Used() {
  DeviceRecord* d = &segment_->devices[ordinal_];
  RecordLock lock(d);
  ReapDead(d);
  return d->used;
}

}  // namespace memsim
