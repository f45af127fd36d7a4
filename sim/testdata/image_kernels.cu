// Device code of the kernels used by the nvcc-image tests (sim/src/*_test.cc, tests/sim/).
// Only the images matter: the sim runs host implementations named by the mangled names below
// (tests/sim/image_host_kernels.cc and image_test.cc), never this device code.
struct Bytes3 {
  char c[3];
};
struct __align__(16) Aligned16 {
  int a;
  int b;
};

__device__ int g_counter = 42;
__device__ float g_table[4] = {1.0f, 2.0f, 3.0f, 4.0f};
__device__ int g_zero[8];

// _Z5scalePffi
__global__ void scale(float* data, float factor, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}

// _Z9aligned16i6float46Bytes37double2c9Aligned16sPd: offsets 0/16/32/48/64/80/96, out at 104.
__global__ void aligned16(int a, float4 b, Bytes3 c, double2 d, char e, Aligned16 f, short g,
                          double* out) {
  out[0] = a + b.x + b.w + c.c[2] + d.x + d.y + e + f.a + f.b + g;
}

// _Z9add_valuePii: its host implementation lives in the test executable itself.
__global__ void add_value(int* data, int value) { data[threadIdx.x] += value; }

// _Z12no_host_implPi: no host implementation anywhere.
__global__ void no_host_impl(int* data) { data[0] = g_counter + g_zero[0] + (int)g_table[1]; }

extern "C" __global__ void c_linkage(unsigned long long* out) { out[0] = 7 * gridDim.x; }
