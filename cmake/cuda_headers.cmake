# Locates the CUDA toolkit's driver API header (cuda.h) and stub libcuda.
# Only headers and the link stub are used: nothing here needs a GPU.
set(CUDA_TOOLKIT_ROOT "/usr/local/cuda" CACHE PATH "CUDA toolkit root (headers and stubs)")
find_path(CUDA_DRIVER_INCLUDE_DIR cuda.h
  HINTS ${CUDA_TOOLKIT_ROOT}/include ${CUDA_TOOLKIT_ROOT}/targets/x86_64-linux/include
  REQUIRED)
find_library(CUDA_DRIVER_STUB_LIBRARY cuda
  HINTS ${CUDA_TOOLKIT_ROOT}/lib64/stubs ${CUDA_TOOLKIT_ROOT}/targets/x86_64-linux/lib/stubs
  NO_DEFAULT_PATH REQUIRED)

# cuda::headers: include path for cuda.h, nothing to link.
add_library(cuda_headers INTERFACE)
target_include_directories(cuda_headers SYSTEM INTERFACE ${CUDA_DRIVER_INCLUDE_DIR})
add_library(cuda::headers ALIAS cuda_headers)

# cuda::stub: what an unmodified application links against (-lcuda from the
# toolkit's stubs). At run time the dynamic loader picks libcuda.so.1 from
# LD_LIBRARY_PATH: the real driver or build/lib/sim.
add_library(cuda_stub INTERFACE)
target_link_libraries(cuda_stub INTERFACE cuda_headers ${CUDA_DRIVER_STUB_LIBRARY})
add_library(cuda::stub ALIAS cuda_stub)
