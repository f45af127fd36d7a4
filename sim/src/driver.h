// Process-wide state of the simulated driver: configuration, devices and handle tables.
//
// Note [never destroyed]: the Driver is created on first use and intentionally leaked, so stream
// worker threads and late API calls from other libraries' destructors never race with static
// destruction at exit.
//
// Thread safety: thread-safe. Devices are created once by the first successful cuInit and are
// immutable afterwards.
#ifndef MEMSIM_SRC_DRIVER_H_
#define MEMSIM_SRC_DRIVER_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "config.h"
#include "context.h"
#include "cuda_api.h"
#include "device.h"
#include "event.h"
#include "graph.h"
#include "host_memory.h"
#include "mem_pool.h"
#include "module.h"
#include "physical.h"
#include "registry.h"
#include "stream.h"

namespace memsim {

class Driver {
 public:
  static Driver& Get();

  CUresult Init(unsigned flags);
  bool initialized() const { return initialized_.load(std::memory_order_acquire); }
  const Config& config() const { return config_; }

  int device_count() const { return static_cast<int>(devices_.size()); }
  Device* device(CUdevice ordinal) const;  // nullptr when out of range
  Device* DeviceForAddress(uint64_t addr) const;

  HandleRegistry<Context> contexts;
  HandleRegistry<Stream> streams;
  HandleRegistry<Event> events;
  HandleRegistry<Module> modules;
  HandleRegistry<Physical> physical;
  HandleRegistry<MemPool> pools;
  HandleRegistry<Graph> graphs;
  HandleRegistry<GraphNode> graph_nodes;
  HandleRegistry<GraphExec> graph_execs;
  HostMemoryTable host_memory;

  // Functions are owned by modules; this maps the live CUfunction and CUkernel values of each
  // function (Note [kernel handles] in module.h) to it and its module. nullptr when `handle` is
  // neither.
  enum class FunctionHandleKind { kFunction, kKernel };
  std::shared_ptr<Module> LookupFunction(const void* handle, Function** fn,
                                         FunctionHandleKind* kind);
  void RegisterFunction(Function* fn, const std::shared_ptr<Module>& module);
  void UnregisterModuleFunctions(const Module* module);

 private:
  Driver() = default;

  std::mutex init_mu_;
  std::atomic<bool> initialized_{false};
  CUresult init_result_ = CUDA_ERROR_NOT_INITIALIZED;
  Config config_;
  std::vector<std::unique_ptr<Device>> devices_;

  std::mutex fn_mu_;
  struct FunctionRecord {
    std::weak_ptr<Module> module;
    Function* fn;
    FunctionHandleKind kind;
  };
  std::unordered_map<const void*, FunctionRecord> functions_;
};

// --- per-thread current context stack (cuCtxPushCurrent / cuCtxSetCurrent) -------------------
Context* CurrentContextRaw();
void SetCurrentContext(Context* ctx);  // replaces the top (or pushes onto an empty stack)
void PushCurrentContext(Context* ctx);
Context* PopCurrentContext();               // nullptr when empty
void RemoveFromCurrentStack(Context* ctx);  // on destroy (calling thread only)

}  // namespace memsim

#endif  // MEMSIM_SRC_DRIVER_H_
