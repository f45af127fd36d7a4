#include "shim/core/graph_walk.h"

#include <algorithm>
#include <cstring>

namespace memvirt::shim {
namespace {

constexpr int kMaxGraphDepth = 16;

// The device bytes one side of a cuMemcpy3D descriptor may touch.
MemRange CopySide(CUmemorytype type, CUdeviceptr device, size_t x, size_t y, size_t z, size_t pitch,
                  size_t plane_rows, size_t width, size_t height, size_t depth) {
  if ((type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED) || height == 0 ||
      depth == 0 || width == 0) {
    return {};
  }
  if (pitch == 0) pitch = width;
  if (plane_rows == 0) plane_rows = height;
  return {device + (z * plane_rows + y) * pitch + x,
          ((depth - 1) * plane_rows + (height - 1)) * pitch + width};
}

void WalkKernelNode(const Driver& driver, CUgraphNode node, GraphWalk* walk) {
  if (driver.cuGraphKernelNodeGetParams_v2 == nullptr) {
    return walk->MarkOpaque("the driver lacks cuGraphKernelNodeGetParams_v2");
  }
  CUDA_KERNEL_NODE_PARAMS_v2 p;
  std::memset(&p, 0, sizeof(p));
  if (driver.cuGraphKernelNodeGetParams_v2(node, &p) != CUDA_SUCCESS) {
    return walk->MarkOpaque("kernel node parameters unavailable");
  }
  GraphKernelNode kernel;
  if (p.kernelParams != nullptr) {
    kernel.function = p.func != nullptr ? p.func : reinterpret_cast<CUfunction>(p.kern);
    if (kernel.function == nullptr) {
      return walk->MarkOpaque("a kernel without parameter information");
    }
    kernel.params = p.kernelParams;
    walk->kernels.push_back(std::move(kernel));
    return;
  }
  if (p.extra == nullptr) return;  // no arguments
  const char* buffer = nullptr;
  size_t bytes = 0;
  for (void** e = p.extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
    if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      buffer = static_cast<const char*>(e[1]);
    } else if (e[0] == CU_LAUNCH_PARAM_BUFFER_SIZE && e[1] != nullptr) {
      bytes = *static_cast<const size_t*>(e[1]);
    } else {
      return walk->MarkOpaque("an unknown kernel `extra` option");
    }
  }
  if (buffer == nullptr) return;
  walk->extra_buffer = true;
  for (size_t off = 0; off + sizeof(uint64_t) <= bytes; off += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, buffer + off, sizeof(word));
    kernel.extra_words.push_back(word);
  }
  walk->kernels.push_back(std::move(kernel));
}

void Walk(const Driver& driver, CUgraph graph, int depth, GraphWalk* walk) {
  if (depth > kMaxGraphDepth) return walk->MarkOpaque("child graphs nested too deeply");
  if (driver.cuGraphGetNodes == nullptr || driver.cuGraphNodeGetType == nullptr) {
    return walk->MarkOpaque("the driver lacks graph queries");
  }
  size_t n = 0;
  if (driver.cuGraphGetNodes(graph, nullptr, &n) != CUDA_SUCCESS) {
    return walk->MarkOpaque("cuGraphGetNodes failed");
  }
  std::vector<CUgraphNode> nodes(n);
  if (n > 0 && driver.cuGraphGetNodes(graph, nodes.data(), &n) != CUDA_SUCCESS) {
    return walk->MarkOpaque("cuGraphGetNodes failed");
  }
  nodes.resize(std::min(n, nodes.size()));
  for (CUgraphNode node : nodes) {
    if (!walk->decodable) return;
    ++walk->nodes;
    CUgraphNodeType type;
    if (driver.cuGraphNodeGetType(node, &type) != CUDA_SUCCESS) {
      return walk->MarkOpaque("cuGraphNodeGetType failed");
    }
    switch (type) {
      case CU_GRAPH_NODE_TYPE_KERNEL:
        WalkKernelNode(driver, node, walk);
        break;
      case CU_GRAPH_NODE_TYPE_MEMCPY: {
        CUDA_MEMCPY3D c;
        std::memset(&c, 0, sizeof(c));
        if (driver.cuGraphMemcpyNodeGetParams == nullptr ||
            driver.cuGraphMemcpyNodeGetParams(node, &c) != CUDA_SUCCESS) {
          return walk->MarkOpaque("memcpy node parameters unavailable");
        }
        const size_t depth3 = c.Depth == 0 ? 1 : c.Depth;
        for (const MemRange& r :
             {CopySide(c.srcMemoryType, c.srcDevice, c.srcXInBytes, c.srcY, c.srcZ, c.srcPitch,
                       c.srcHeight, c.WidthInBytes, c.Height, depth3),
              CopySide(c.dstMemoryType, c.dstDevice, c.dstXInBytes, c.dstY, c.dstZ, c.dstPitch,
                       c.dstHeight, c.WidthInBytes, c.Height, depth3)}) {
          if (r.bytes != 0) walk->ranges.push_back(r);
        }
        break;
      }
      case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS m;
        std::memset(&m, 0, sizeof(m));
        if (driver.cuGraphMemsetNodeGetParams == nullptr ||
            driver.cuGraphMemsetNodeGetParams(node, &m) != CUDA_SUCCESS) {
          return walk->MarkOpaque("memset node parameters unavailable");
        }
        if (m.width != 0 && m.height != 0) {
          const uint64_t row = static_cast<uint64_t>(m.width) * m.elementSize;
          walk->ranges.push_back({m.dst, (m.height - 1) * m.pitch + row});
        }
        break;
      }
      case CU_GRAPH_NODE_TYPE_GRAPH: {
        CUgraph child = nullptr;
        if (driver.cuGraphChildGraphNodeGetGraph == nullptr ||
            driver.cuGraphChildGraphNodeGetGraph(node, &child) != CUDA_SUCCESS) {
          return walk->MarkOpaque("child graph unavailable");
        }
        Walk(driver, child, depth + 1, walk);
        break;
      }
      case CU_GRAPH_NODE_TYPE_HOST:
      case CU_GRAPH_NODE_TYPE_EMPTY:
      case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL:
      case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT:
      case CU_GRAPH_NODE_TYPE_MEM_ALLOC:  // the driver's graph memory, not the shim's
      case CU_GRAPH_NODE_TYPE_MEM_FREE:
        break;
      default:  // batch memory operations, conditional nodes, newer types
        return walk->MarkOpaque("a node type the shim cannot decode");
    }
  }
}

}  // namespace

void WalkGraph(const Driver& driver, CUgraph graph, GraphWalk* walk) {
  Walk(driver, graph, 0, walk);
}

}  // namespace memvirt::shim
