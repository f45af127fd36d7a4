#include "shim/testing/fake_driver.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace memvirt::shim::testing {
namespace {

constexpr uint64_t kPage = 2ull << 20;
FakeDriver* g_fake = nullptr;
FaultInjector* g_faults = nullptr;

}  // namespace

// The C entry points, each a thin shell over the active FakeDriver.
struct FakeEntryPoints {
  using Self = FakeDriver;
  static std::unique_lock<std::recursive_mutex> Lock() {
    return std::unique_lock<std::recursive_mutex>(g_fake->mu_);
  }

  static CUresult CtxGetCurrent(CUcontext* ctx) {
    *ctx = reinterpret_cast<CUcontext>(&g_fake->context_token_);
    return CUDA_SUCCESS;
  }
  static CUresult CtxGetDevice(CUdevice* dev) {
    *dev = 0;
    return CUDA_SUCCESS;
  }
  static CUresult DeviceGetAttribute(int* value, CUdevice_attribute attr, CUdevice) {
    auto lock = Lock();
    const bool numa = g_fake->host_numa_supported_;
    if (attr == CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID) {
      *value = numa ? 0 : -1;
    } else if (attr == CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) {
      *value = numa ? 1 : 0;
    } else {
      *value = 1;
    }
    return CUDA_SUCCESS;
  }
  static CUresult GetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                           CUmemAllocationGranularity_flags) {
    auto lock = Lock();
    if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && !g_fake->host_numa_supported_) {
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    *granularity = 2u << 20;
    return CUDA_SUCCESS;
  }
  static CUresult MemGetInfo(size_t* free, size_t* total) {
    auto lock = Lock();
    *total = g_fake->device_capacity_;
    *free = g_fake->device_capacity_ - g_fake->device_used_;
    return CUDA_SUCCESS;
  }
  static CUresult AddressReserve(CUdeviceptr* ptr, size_t size, size_t align, CUdeviceptr,
                                 unsigned long long) {
    auto lock = Lock();
    if (size == 0 || size % kPage != 0) return CUDA_ERROR_INVALID_VALUE;
    if (g_fake->max_reservation_ != 0 && size > g_fake->max_reservation_) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (align < kPage) align = kPage;
    void* p =
        mmap(nullptr, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t base = (reinterpret_cast<uintptr_t>(p) + align - 1) & ~(align - 1);
    uintptr_t start = reinterpret_cast<uintptr_t>(p);
    if (base > start) munmap(p, base - start);
    uintptr_t end = start + size + align;
    if (end > base + size) munmap(reinterpret_cast<void*>(base + size), end - (base + size));
    g_fake->reservations_[base] = size;
    *ptr = base;
    return CUDA_SUCCESS;
  }
  static CUresult AddressFree(CUdeviceptr ptr, size_t size) {
    auto lock = Lock();
    auto it = g_fake->reservations_.find(ptr);
    if (it == g_fake->reservations_.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
    for (CUdeviceptr p = ptr; p < ptr + size; p += kPage) {
      if (g_fake->mapped_.count(p)) return CUDA_ERROR_INVALID_VALUE;  // still mapped
    }
    munmap(reinterpret_cast<void*>(ptr), size);
    g_fake->reservations_.erase(it);
    return CUDA_SUCCESS;
  }
  static CUresult Create(CUmemGenericAllocationHandle* handle, size_t size,
                         const CUmemAllocationProp* prop, unsigned long long) {
    auto lock = Lock();
    if (size == 0 || size % kPage != 0) return CUDA_ERROR_INVALID_VALUE;
    const bool host = prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
    if (host && !g_fake->host_numa_supported_) return CUDA_ERROR_NOT_SUPPORTED;
    if (!host && g_fake->device_used_ + size > g_fake->device_capacity_) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    int fd = memfd_create("fake-physical", 0);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
      if (fd >= 0) close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    (host ? g_fake->host_used_ : g_fake->device_used_) += size;
    *handle = g_fake->next_handle_++;
    g_fake->physical_[*handle] = {fd, size, host};
    return CUDA_SUCCESS;
  }
  static CUresult Release(CUmemGenericAllocationHandle handle) {
    auto lock = Lock();
    auto it = g_fake->physical_.find(handle);
    if (it == g_fake->physical_.end()) return CUDA_ERROR_INVALID_VALUE;
    close(it->second.fd);
    (it->second.host ? g_fake->host_used_ : g_fake->device_used_) -= it->second.bytes;
    g_fake->physical_.erase(it);
    return CUDA_SUCCESS;
  }
  // POSIX file descriptors only: a duplicate of the physical memory's memfd.
  static CUresult ExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                          CUmemAllocationHandleType type, unsigned long long) {
    auto lock = Lock();
    auto it = g_fake->physical_.find(handle);
    if (it == g_fake->physical_.end() || shareable == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
    const int fd = dup(it->second.fd);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    *static_cast<int*>(shareable) = fd;
    return CUDA_SUCCESS;
  }
  static bool InReservation(CUdeviceptr ptr, size_t size) {
    auto it = g_fake->reservations_.upper_bound(ptr);
    if (it == g_fake->reservations_.begin()) return false;
    --it;
    return ptr >= it->first && ptr + size <= it->first + it->second;
  }
  static CUresult Map(CUdeviceptr ptr, size_t size, size_t offset,
                      CUmemGenericAllocationHandle handle, unsigned long long) {
    auto lock = Lock();
    auto it = g_fake->physical_.find(handle);
    if (it == g_fake->physical_.end() || offset + size > it->second.bytes ||
        !InReservation(ptr, size) || size % kPage != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    for (CUdeviceptr p = ptr; p < ptr + size; p += kPage) {
      if (g_fake->mapped_.count(p)) return CUDA_ERROR_INVALID_VALUE;  // double map
    }
    void* m = mmap(reinterpret_cast<void*>(ptr), size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_FIXED, it->second.fd, static_cast<off_t>(offset));
    if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    for (CUdeviceptr p = ptr; p < ptr + size; p += kPage) g_fake->mapped_.insert(p);
    ++g_fake->maps_;
    return CUDA_SUCCESS;
  }
  static CUresult Unmap(CUdeviceptr ptr, size_t size) {
    auto lock = Lock();
    for (CUdeviceptr p = ptr; p < ptr + size; p += kPage) {
      if (!g_fake->mapped_.count(p)) return CUDA_ERROR_INVALID_VALUE;
    }
    mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    for (CUdeviceptr p = ptr; p < ptr + size; p += kPage) g_fake->mapped_.erase(p);
    return CUDA_SUCCESS;
  }
  static CUresult SetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc*, size_t count) {
    auto lock = Lock();
    if (count == 0) return CUDA_ERROR_INVALID_VALUE;
    return g_fake->IsMapped(ptr, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
  static CUresult CopyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
    auto lock = Lock();
    ++g_fake->copies_;
    g_fake->EnqueueTouch(stream, src, bytes, nullptr);
    g_fake->EnqueueTouch(stream, dst, bytes, [dst, src, bytes] {
      memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
    });
    return CUDA_SUCCESS;
  }
  static CUresult CopyHtoDAsync(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
    auto lock = Lock();
    ++g_fake->copies_;
    g_fake->EnqueueTouch(stream, dst, bytes,
                         [dst, src, bytes] { memmove(reinterpret_cast<void*>(dst), src, bytes); });
    return CUDA_SUCCESS;
  }
  static CUresult CopyDtoHAsync(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
    auto lock = Lock();
    ++g_fake->copies_;
    g_fake->EnqueueTouch(stream, src, bytes,
                         [dst, src, bytes] { memmove(dst, reinterpret_cast<void*>(src), bytes); });
    return CUDA_SUCCESS;
  }
  static CUresult StreamCreate(CUstream* stream, unsigned) {
    auto lock = Lock();
    *stream = g_fake->CreateStream();
    g_fake->StreamOf(*stream)->held = g_fake->hold_new_streams_;
    g_fake->created_.push_back(*stream);
    return CUDA_SUCCESS;
  }
  static CUresult StreamDestroy(CUstream stream) {
    auto lock = Lock();
    FakeDriver::Stream* s = g_fake->StreamOf(stream);
    s->held = false;
    g_fake->DrainLocked();
    return CUDA_SUCCESS;
  }
  static CUresult StreamWaitEvent(CUstream stream, CUevent event, unsigned) {
    auto lock = Lock();
    auto* e = reinterpret_cast<FakeDriver::Event*>(event);
    FakeDriver::Op op;
    op.wait = e;
    op.wait_token = e->recorded;
    g_fake->StreamOf(stream)->queue.push_back(std::move(op));
    g_fake->DrainLocked();
    return CUDA_SUCCESS;
  }
  static CUresult EventCreate(CUevent* event, unsigned) {
    auto lock = Lock();
    g_fake->events_.push_back(std::make_unique<FakeDriver::Event>());
    *event = reinterpret_cast<CUevent>(g_fake->events_.back().get());
    return CUDA_SUCCESS;
  }
  static CUresult EventRecord(CUevent event, CUstream stream) {
    auto lock = Lock();
    auto* e = reinterpret_cast<FakeDriver::Event*>(event);
    FakeDriver::Stream* s = g_fake->StreamOf(stream);
    e->stream = s;
    const uint64_t token = ++e->recorded;
    FakeDriver::Op op;
    op.fn = [e, token] { e->completed = token; };
    s->queue.push_back(std::move(op));
    g_fake->DrainLocked();
    return CUDA_SUCCESS;
  }
  static CUresult EventQuery(CUevent event) {
    auto lock = Lock();
    auto* e = reinterpret_cast<FakeDriver::Event*>(event);
    return e->completed == e->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  }
  static CUresult EventSynchronize(CUevent event) {
    auto lock = Lock();
    auto* e = reinterpret_cast<FakeDriver::Event*>(event);
    return g_fake->RunUntil(e, /*force=*/true) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
  }
  static CUresult EventDestroy(CUevent) { return CUDA_SUCCESS; }
  static CUresult FuncGetParamInfo(CUfunction func, size_t index, size_t* offset, size_t* size) {
    auto lock = Lock();
    if (g_fake->opaque_functions_.count(func)) return CUDA_ERROR_NOT_SUPPORTED;
    if (auto it = g_fake->kernels_.find(func); it != g_fake->kernels_.end()) return it->second;
    return ParamInfo(func, index, offset, size);
  }
  static CUresult KernelGetParamInfo(CUkernel kernel, size_t index, size_t* offset, size_t* size) {
    auto lock = Lock();
    if (g_fake->kernels_.count(kernel) == 0) return CUDA_ERROR_INVALID_HANDLE;
    return ParamInfo(kernel, index, offset, size);
  }
  static CUresult ParamInfo(const void* handle, size_t index, size_t* offset, size_t* size) {
    const auto* sizes = static_cast<const std::vector<uint32_t>*>(handle);
    if (index >= sizes->size()) return CUDA_ERROR_INVALID_VALUE;
    size_t off = 0;
    for (size_t i = 0; i <= index; ++i) {
      const size_t align = std::clamp<size_t>((*sizes)[i], 1, 8);  // size 0: no alignment
      off = (off + align - 1) / align * align;
      if (i == index) break;
      off += (*sizes)[i];
    }
    *offset = off;
    *size = (*sizes)[index];
    return CUDA_SUCCESS;
  }
  static CUresult StreamIsCapturing(CUstream, CUstreamCaptureStatus* status) {
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  }
  static FakeDriver::GraphNode* Node(CUgraphNode node) {
    return reinterpret_cast<FakeDriver::GraphNode*>(node);
  }
  static CUresult GraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* count) {
    auto lock = Lock();
    auto* g = reinterpret_cast<FakeDriver::Graph*>(graph);
    if (g == nullptr || count == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (nodes == nullptr) {
      *count = g->nodes.size();
      return CUDA_SUCCESS;
    }
    const size_t n = std::min(*count, g->nodes.size());
    for (size_t i = 0; i < *count; ++i) {
      nodes[i] = i < n ? reinterpret_cast<CUgraphNode>(g->nodes[i].get()) : nullptr;
    }
    *count = n;
    return CUDA_SUCCESS;
  }
  static CUresult GraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
    *type = Node(node)->type;
    return CUDA_SUCCESS;
  }
  static CUresult GraphKernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* p) {
    FakeDriver::GraphNode* n = Node(node);
    if (n->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
    *p = CUDA_KERNEL_NODE_PARAMS{};
    p->func = n->func;
    if (n->extra_bytes != 0) {
      p->extra = n->extra;
    } else if (!n->params.empty()) {
      p->kernelParams = n->params.data();
    }
    return CUDA_SUCCESS;
  }
  static CUresult GraphMemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D* p) {
    if (Node(node)->type != CU_GRAPH_NODE_TYPE_MEMCPY) return CUDA_ERROR_INVALID_VALUE;
    *p = Node(node)->copy;
    return CUDA_SUCCESS;
  }
  static CUresult GraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS* p) {
    if (Node(node)->type != CU_GRAPH_NODE_TYPE_MEMSET) return CUDA_ERROR_INVALID_VALUE;
    *p = Node(node)->memset;
    return CUDA_SUCCESS;
  }
  static CUresult GraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph* child) {
    if (Node(node)->type != CU_GRAPH_NODE_TYPE_GRAPH) return CUDA_ERROR_INVALID_VALUE;
    *child = Node(node)->child;
    return CUDA_SUCCESS;
  }
};

FakeDriver::FakeDriver(uint64_t device_bytes) : device_capacity_(device_bytes) {
  g_fake = this;
  using E = FakeEntryPoints;
  driver_.cuCtxGetCurrent = &E::CtxGetCurrent;
  driver_.cuCtxGetDevice = &E::CtxGetDevice;
  driver_.cuDeviceGetAttribute = &E::DeviceGetAttribute;
  driver_.cuMemGetAllocationGranularity = &E::GetAllocationGranularity;
  driver_.cuMemGetInfo_v2 = &E::MemGetInfo;
  driver_.cuMemAddressReserve = &E::AddressReserve;
  driver_.cuMemAddressFree = &E::AddressFree;
  driver_.cuMemCreate = &E::Create;
  driver_.cuMemRelease = &E::Release;
  driver_.cuMemMap = &E::Map;
  driver_.cuMemUnmap = &E::Unmap;
  driver_.cuMemSetAccess = &E::SetAccess;
  driver_.cuMemExportToShareableHandle = &E::ExportToShareableHandle;
  driver_.cuMemcpyDtoDAsync_v2 = &E::CopyDtoDAsync;
  driver_.cuMemcpyHtoDAsync_v2 = &E::CopyHtoDAsync;
  driver_.cuMemcpyDtoHAsync_v2 = &E::CopyDtoHAsync;
  driver_.cuStreamCreate = &E::StreamCreate;
  driver_.cuStreamDestroy_v2 = &E::StreamDestroy;
  driver_.cuStreamWaitEvent = &E::StreamWaitEvent;
  driver_.cuEventCreate = &E::EventCreate;
  driver_.cuEventRecord = &E::EventRecord;
  driver_.cuEventQuery = &E::EventQuery;
  driver_.cuEventSynchronize = &E::EventSynchronize;
  driver_.cuEventDestroy_v2 = &E::EventDestroy;
  driver_.cuFuncGetParamInfo = &E::FuncGetParamInfo;
  driver_.cuKernelGetParamInfo = &E::KernelGetParamInfo;
  driver_.cuStreamIsCapturing = &E::StreamIsCapturing;
  driver_.cuGraphGetNodes = &E::GraphGetNodes;
  driver_.cuGraphNodeGetType = &E::GraphNodeGetType;
  driver_.cuGraphKernelNodeGetParams_v2 = &E::GraphKernelNodeGetParams;
  driver_.cuGraphMemcpyNodeGetParams = &E::GraphMemcpyNodeGetParams;
  driver_.cuGraphMemsetNodeGetParams = &E::GraphMemsetNodeGetParams;
  driver_.cuGraphChildGraphNodeGetGraph = &E::GraphChildGraphNodeGetGraph;
}

FakeDriver::~FakeDriver() {
  for (auto& [handle, p] : physical_) close(p.fd);
  for (auto& [base, bytes] : reservations_) munmap(reinterpret_cast<void*>(base), bytes);
  g_fake = nullptr;
}

CUfunction FakeDriver::MakeFunction(std::vector<uint32_t> param_sizes, bool opaque) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  functions_.push_back(std::make_unique<std::vector<uint32_t>>(std::move(param_sizes)));
  auto f = reinterpret_cast<CUfunction>(functions_.back().get());
  if (opaque) opaque_functions_.insert(f);
  return f;
}

CUfunction FakeDriver::MakeKernel(std::vector<uint32_t> param_sizes, CUresult func_answer) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  functions_.push_back(std::make_unique<std::vector<uint32_t>>(std::move(param_sizes)));
  auto f = reinterpret_cast<CUfunction>(functions_.back().get());
  kernels_[f] = func_answer;
  return f;
}

CUgraph FakeDriver::MakeGraph() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  graphs_.push_back(std::make_unique<Graph>());
  return reinterpret_cast<CUgraph>(graphs_.back().get());
}

FakeDriver::GraphNode* FakeDriver::NewNode(CUgraph graph, CUgraphNodeType type) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  auto* g = reinterpret_cast<Graph*>(graph);
  g->nodes.push_back(std::make_unique<GraphNode>());
  g->nodes.back()->type = type;
  return g->nodes.back().get();
}

void FakeDriver::AddKernelNode(CUgraph graph, CUfunction f, std::vector<uint64_t> words,
                               bool via_extra) {
  GraphNode* n = NewNode(graph, CU_GRAPH_NODE_TYPE_KERNEL);
  n->func = f;
  n->words = std::move(words);
  if (via_extra) {
    n->extra_bytes = n->words.size() * sizeof(uint64_t);
    n->extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
    n->extra[1] = n->words.data();
    n->extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
    n->extra[3] = &n->extra_bytes;
    n->extra[4] = CU_LAUNCH_PARAM_END;
    return;
  }
  for (uint64_t& w : n->words) n->params.push_back(&w);
}

void FakeDriver::AddMemsetNode(CUgraph graph, CUdeviceptr dst, uint64_t bytes) {
  GraphNode* n = NewNode(graph, CU_GRAPH_NODE_TYPE_MEMSET);
  n->memset.dst = dst;
  n->memset.elementSize = 1;
  n->memset.width = bytes;
  n->memset.height = 1;
  n->memset.pitch = bytes;
}

void FakeDriver::AddMemcpyNode(CUgraph graph, CUdeviceptr dst, CUdeviceptr src, uint64_t bytes) {
  GraphNode* n = NewNode(graph, CU_GRAPH_NODE_TYPE_MEMCPY);
  n->copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  n->copy.srcDevice = src;
  n->copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  n->copy.dstDevice = dst;
  n->copy.WidthInBytes = bytes;
  n->copy.Height = 1;
  n->copy.Depth = 1;
}

void FakeDriver::AddChildGraphNode(CUgraph graph, CUgraph child) {
  NewNode(graph, CU_GRAPH_NODE_TYPE_GRAPH)->child = child;
}

void FakeDriver::AddNode(CUgraph graph, CUgraphNodeType type) { NewNode(graph, type); }

CUstream FakeDriver::CreateStream() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  streams_.push_back(std::make_unique<Stream>());
  return reinterpret_cast<CUstream>(streams_.back().get());
}

FakeDriver::Stream* FakeDriver::StreamOf(CUstream handle) {
  if (handle == nullptr || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD) {
    return &legacy_;
  }
  return reinterpret_cast<Stream*>(handle);
}

std::vector<CUstream> FakeDriver::created_streams() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return created_;
}

bool FakeDriver::IsMapped(CUdeviceptr ptr, uint64_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (bytes == 0) return true;
  for (CUdeviceptr p = ptr & ~(kPage - 1); p < ptr + bytes; p += kPage) {
    if (!mapped_.count(p)) return false;
  }
  return true;
}

void FakeDriver::Enqueue(CUstream stream, std::function<void()> work) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Op op;
  op.fn = std::move(work);
  StreamOf(stream)->queue.push_back(std::move(op));
  DrainLocked();
}

void FakeDriver::EnqueueTouch(CUstream stream, CUdeviceptr ptr, uint64_t bytes,
                              std::function<void()> body) {
  Enqueue(stream, [this, ptr, bytes, body = std::move(body)] {
    if (!IsMapped(ptr, bytes)) {
      ++faults_;
      return;
    }
    if (body) body();
  });
}

void FakeDriver::Hold(CUstream stream) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  StreamOf(stream)->held = true;
}

void FakeDriver::Release(CUstream stream) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  StreamOf(stream)->held = false;
  DrainLocked();
}

bool FakeDriver::StepLocked(Stream* s, bool force) {
  if (s->queue.empty() || (s->held && !force)) return false;
  Op& front = s->queue.front();
  if (front.wait != nullptr && front.wait->completed < front.wait_token) {
    Event* e = front.wait;
    while (e->completed < front.wait_token) {
      if (e->stream == s || !StepLocked(e->stream, force)) return false;
    }
  }
  Op op = std::move(s->queue.front());
  s->queue.pop_front();
  if (op.fn) op.fn();
  return true;
}

void FakeDriver::DrainLocked() {
  bool progress = true;
  while (progress) {
    progress = false;
    while (StepLocked(&legacy_, false)) progress = true;
    for (auto& s : streams_) {
      while (StepLocked(s.get(), false)) progress = true;
    }
  }
}

bool FakeDriver::RunUntil(Event* e, bool force) {
  while (e->completed < e->recorded) {
    if (e->stream == nullptr || !StepLocked(e->stream, force)) return false;
  }
  DrainLocked();
  return true;
}

}  // namespace memvirt::shim::testing

namespace memvirt::shim::testing {

struct FaultEntryPoints {
  static bool Trip(int* counter) {
    if (*counter <= 0) return false;
    --*counter;
    return true;
  }
  static CUresult Create(CUmemGenericAllocationHandle* h, size_t size,
                         const CUmemAllocationProp* prop, unsigned long long flags) {
    if (Trip(&g_faults->fail_create_)) return CUDA_ERROR_OUT_OF_MEMORY;
    return g_faults->base_.cuMemCreate(h, size, prop, flags);
  }
  static CUresult Map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                      unsigned long long flags) {
    if (g_faults->pass_map_ > 0) {
      --g_faults->pass_map_;
    } else if (Trip(&g_faults->fail_map_)) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return g_faults->base_.cuMemMap(ptr, size, offset, h, flags);
  }
  static CUresult Unmap(CUdeviceptr ptr, size_t size) {
    if (Trip(&g_faults->fail_unmap_)) return CUDA_ERROR_INVALID_VALUE;
    return g_faults->base_.cuMemUnmap(ptr, size);
  }
  static CUresult SetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                            size_t count) {
    if (Trip(&g_faults->fail_set_access_)) return CUDA_ERROR_OUT_OF_MEMORY;
    return g_faults->base_.cuMemSetAccess(ptr, size, desc, count);
  }
  static CUresult Copy(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
    if (Trip(&g_faults->fail_copy_)) return CUDA_ERROR_LAUNCH_FAILED;
    return g_faults->base_.cuMemcpyDtoDAsync_v2(dst, src, bytes, stream);
  }
  static CUresult CopyHtoD(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
    if (Trip(&g_faults->fail_host_copy_)) return CUDA_ERROR_LAUNCH_FAILED;
    return g_faults->base_.cuMemcpyHtoDAsync_v2(dst, src, bytes, stream);
  }
  static CUresult CopyDtoH(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
    if (Trip(&g_faults->fail_host_copy_)) return CUDA_ERROR_LAUNCH_FAILED;
    return g_faults->base_.cuMemcpyDtoHAsync_v2(dst, src, bytes, stream);
  }
  static CUresult EventRecord(CUevent event, CUstream stream) {
    if (Trip(&g_faults->fail_event_record_)) return CUDA_ERROR_LAUNCH_FAILED;
    return g_faults->base_.cuEventRecord(event, stream);
  }
  static CUresult EventSynchronize(CUevent event) {
    if (Trip(&g_faults->fail_event_sync_)) return CUDA_ERROR_LAUNCH_FAILED;
    return g_faults->base_.cuEventSynchronize(event);
  }
  static CUresult EventQuery(CUevent event) {
    if (Trip(&g_faults->fail_event_query_)) return CUDA_ERROR_LAUNCH_FAILED;
    return g_faults->base_.cuEventQuery(event);
  }
  static CUresult StreamWaitEvent(CUstream stream, CUevent event, unsigned flags) {
    if (Trip(&g_faults->fail_stream_wait_)) return CUDA_ERROR_LAUNCH_FAILED;
    return g_faults->base_.cuStreamWaitEvent(stream, event, flags);
  }
};

FaultInjector::FaultInjector(const Driver& base) : base_(base), driver_(base) {
  g_faults = this;
  using E = FaultEntryPoints;
  driver_.cuMemCreate = &E::Create;
  driver_.cuMemMap = &E::Map;
  driver_.cuMemUnmap = &E::Unmap;
  driver_.cuMemSetAccess = &E::SetAccess;
  driver_.cuMemcpyDtoDAsync_v2 = &E::Copy;
  driver_.cuMemcpyHtoDAsync_v2 = &E::CopyHtoD;
  driver_.cuMemcpyDtoHAsync_v2 = &E::CopyDtoH;
  driver_.cuEventRecord = &E::EventRecord;
  driver_.cuEventSynchronize = &E::EventSynchronize;
  driver_.cuStreamWaitEvent = &E::StreamWaitEvent;
  driver_.cuEventQuery = &E::EventQuery;
}

FaultInjector::~FaultInjector() { g_faults = nullptr; }

}  // namespace memvirt::shim::testing
