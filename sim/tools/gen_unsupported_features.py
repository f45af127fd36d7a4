#!/usr/bin/env python3
"""Regenerates sim/src/api_unsupported_features.cc: driver entry points of features the sim does
not have, each answering what the real driver answers when the feature is unavailable.

Every flavour of each listed name (PFN_<name>_v<version>[_ptsz|_ptds] in the toolkit's
cudaTypedefs.h, exported as <name>, <name>_v2, ... like gen_proc_address_table.py names them) is
defined with the typedef's parameter list, so the compiler checks each against cuda.h. Flavours
already defined in another sim/src/api_*.cc are skipped. Names whose typedefs live in other
headers (OpenGL, EGL, VDPAU interop) are not exported: cuGetProcAddress reports them as not found.

usage: gen_unsupported_features.py [CUDA_INCLUDE_DIR]   (default /usr/local/cuda/include)
Run gen_proc_address_table.py afterwards.
"""
import collections
import pathlib
import re
import sys

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"
OUT = SRC / "api_unsupported_features.cc"

# (group comment, error returned, base names). docs/sim.md lists the groups.
GROUPS = [
    ("CUDA arrays, mipmapped arrays, textures and surfaces: the sim has linear memory only.",
     "CUDA_ERROR_NOT_SUPPORTED",
     "cuArrayCreate cuArray3DCreate cuArrayGetDescriptor cuArray3DGetDescriptor "
     "cuArrayGetMemoryRequirements cuArrayGetPlane cuArrayGetSparseProperties "
     "cuMipmappedArrayCreate cuMipmappedArrayDestroy cuMipmappedArrayGetLevel "
     "cuMipmappedArrayGetMemoryRequirements cuMipmappedArrayGetSparseProperties "
     "cuTexObjectCreate cuTexObjectDestroy cuTexObjectGetResourceDesc "
     "cuTexObjectGetResourceViewDesc cuTexObjectGetTextureDesc cuSurfObjectCreate "
     "cuSurfObjectDestroy cuSurfObjectGetResourceDesc cuModuleGetTexRef cuModuleGetSurfRef "
     "cuDeviceGetTexture1DLinearMaxWidth"),
    ("Managed memory: the sim has none, and CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS is 0, so "
     "every range is one these calls reject.",
     "CUDA_ERROR_INVALID_VALUE",
     "cuMemPrefetchAsync cuMemAdvise cuMemRangeGetAttribute cuMemRangeGetAttributes "
     "cuStreamAttachMemAsync cuMemPrefetchBatchAsync cuMemDiscardBatchAsync "
     "cuMemDiscardAndPrefetchBatchAsync"),
    ("External memory and semaphores, graphics interop resources, NvSciSync, async "
     "notifications.",
     "CUDA_ERROR_NOT_SUPPORTED",
     "cuImportExternalMemory cuExternalMemoryGetMappedBuffer "
     "cuExternalMemoryGetMappedMipmappedArray cuDestroyExternalMemory cuImportExternalSemaphore "
     "cuSignalExternalSemaphoresAsync cuWaitExternalSemaphoresAsync cuDestroyExternalSemaphore "
     "cuGraphicsMapResources cuGraphicsUnmapResources cuGraphicsUnregisterResource "
     "cuGraphicsResourceGetMappedPointer cuGraphicsSubResourceGetMappedArray "
     "cuGraphicsResourceGetMappedMipmappedArray cuGraphicsResourceSetMapFlags "
     "cuDeviceGetNvSciSyncAttributes cuDeviceRegisterAsyncNotification "
     "cuDeviceUnregisterAsyncNotification"),
    ("JIT linking and the error-log API: the sim compiles nothing and keeps no driver log.",
     "CUDA_ERROR_NOT_SUPPORTED",
     "cuLinkCreate cuLinkAddData cuLinkAddFile cuLinkComplete cuLinkDestroy cuLogsCurrent "
     "cuLogsDumpToFile cuLogsDumpToMemory cuLogsRegisterCallback cuLogsUnregisterCallback"),
    ("Graph construction beyond stream capture and the node types the sim executes (Note "
     "[graphs] in docs/sim.md): node-level editing, event and memory nodes, child graphs, "
     "conditional nodes, user objects, capture into an existing graph.",
     "CUDA_ERROR_NOT_SUPPORTED",
     "cuGraphAddChildGraphNode cuGraphAddDependencies cuGraphAddEventRecordNode "
     "cuGraphAddEventWaitNode cuGraphAddExternalSemaphoresSignalNode "
     "cuGraphAddExternalSemaphoresWaitNode cuGraphAddMemAllocNode cuGraphAddMemFreeNode "
     "cuGraphAddNode cuGraphChildGraphNodeGetGraph cuGraphClone cuGraphConditionalHandleCreate "
     "cuGraphDebugDotPrint cuGraphDestroyNode cuGraphEventRecordNodeGetEvent "
     "cuGraphEventRecordNodeSetEvent cuGraphEventWaitNodeGetEvent cuGraphEventWaitNodeSetEvent "
     "cuGraphExecEventRecordNodeSetEvent cuGraphExecEventWaitNodeSetEvent "
     "cuGraphExecExternalSemaphoresSignalNodeSetParams "
     "cuGraphExecExternalSemaphoresWaitNodeSetParams cuGraphExecGetFlags "
     "cuGraphExecHostNodeSetParams cuGraphExternalSemaphoresSignalNodeGetParams "
     "cuGraphExternalSemaphoresSignalNodeSetParams cuGraphExternalSemaphoresWaitNodeGetParams "
     "cuGraphExternalSemaphoresWaitNodeSetParams cuGraphGetEdges cuGraphHostNodeSetParams "
     "cuGraphKernelNodeCopyAttributes cuGraphKernelNodeGetAttribute "
     "cuGraphKernelNodeSetAttribute cuGraphMemAllocNodeGetParams cuGraphMemFreeNodeGetParams "
     "cuGraphMemcpyNodeSetParams cuGraphMemsetNodeSetParams cuGraphNodeFindInClone "
     "cuGraphNodeGetDependentNodes cuGraphNodeGetEnabled cuGraphNodeSetEnabled "
     "cuGraphNodeSetParams cuGraphRemoveDependencies cuGraphReleaseUserObject cuGraphRetainUserObject cuGraphUpload "
     "cuUserObjectCreate cuUserObjectRelease cuUserObjectRetain cuStreamBeginCaptureToGraph "
     "cuStreamUpdateCaptureDependencies"),
    ("Multicast objects (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED is 0), green contexts and SM "
     "partitioning, tensor-map encoding (no tensor memory accelerator: kernels run on the CPU).",
     "CUDA_ERROR_NOT_SUPPORTED",
     "cuMulticastCreate cuMulticastAddDevice cuMulticastBindMem cuMulticastBindAddr "
     "cuMulticastUnbind cuMulticastGetGranularity cuGreenCtxCreate cuGreenCtxDestroy "
     "cuCtxFromGreenCtx cuDeviceGetDevResource cuCtxGetDevResource cuGreenCtxGetDevResource "
     "cuDevSmResourceSplitByCount cuDevResourceGenerateDesc cuGreenCtxRecordEvent "
     "cuGreenCtxWaitEvent cuStreamGetGreenCtx cuGreenCtxStreamCreate cuGreenCtxGetId "
     "cuTensorMapEncodeTiled cuTensorMapEncodeIm2col cuTensorMapEncodeIm2colWide "
     "cuTensorMapReplaceAddress"),
    ("Pool export and import (CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES is NONE), "
     "atomic capability queries and the legacy cuCtxDetach.",
     "CUDA_ERROR_NOT_SUPPORTED",
     "cuMemPoolExportToShareableHandle cuMemPoolImportFromShareableHandle cuMemPoolExportPointer "
     "cuMemPoolImportPointer cuDeviceGetHostAtomicCapabilities cuDeviceGetP2PAtomicCapabilities "
     "cuCtxDetach"),
]


def defined_elsewhere():
    text = "".join(p.read_text() for p in sorted(SRC.glob("api_*.cc")) if p != OUT)
    syms = set(re.findall(r"CUresult CUDAAPI (cu\w+)\(", text))
    for a, b in re.findall(r"MEMSIM_BOTH_FLAVOURS\(\s*(cu\w+),\s*(cu\w+)", text):
        syms.update((a, b))
    syms.update(re.findall(r"MEMSIM_NOT_SUPPORTED\((cu\w+)", text))
    return syms


def flavours(typedefs):
    """base name -> [(symbol, parameter list)] in the exported naming."""
    found = collections.defaultdict(list)
    for name, ver, suffix, params in re.findall(
            r"typedef CUresult\s*\(CUDAAPI \s*\*PFN_(cu[A-Za-z0-9]+)_v(\d+)(_ptsz|_ptds)?\)\((.*?)\);",
            typedefs, re.S):
        found[name].append((int(ver), suffix, " ".join(params.split())))
    out = {}
    for base, vs in found.items():
        vs.sort()
        plain = [(v, p) for v, s, p in vs if not s]
        per_thread = [(v, s, p) for v, s, p in vs if s]
        names = [base if i == 0 else f"{base}_v{i + 1}" for i in range(len(plain))]
        syms = [(n, p) for n, (v, p) in zip(names, plain)]
        for (v, s, p), n in zip(per_thread, names[len(names) - len(per_thread):]):
            syms.append((n + s, p))
        out[base] = syms
    return out


def main():
    include = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/local/cuda/include")
    table = flavours((include / "cudaTypedefs.h").read_text())
    skip = defined_elsewhere()
    lines = [
        "// Generated by sim/tools/gen_unsupported_features.py from the toolkit's cudaTypedefs.h:",
        "// entry points of features the sim does not have. Edit the script, not this file.",
        '#include "cuda_api.h"',
        "",
        "// clang-format off",
        'extern "C" {',
    ]
    count = 0
    for comment, error, names in GROUPS:
        lines.append("")
        lines.append("// " + comment)
        for base in names.split():
            if base not in table:
                sys.exit(f"{base}: no typedef in cudaTypedefs.h")
            for sym, params in table[base]:
                if sym in skip:
                    continue
                lines.append(f"CUresult CUDAAPI {sym}({params}) {{ return {error}; }}")
                count += 1
    lines += ["", '}  // extern "C"', "// clang-format on", ""]
    OUT.write_text("\n".join(lines))
    print(f"{count} entry points")


if __name__ == "__main__":
    main()
