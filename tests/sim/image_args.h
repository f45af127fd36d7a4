// Host-side views of the argument types of sim/testdata/image_kernels.cu, shared by their host
// implementations (image_host_kernels.cc) and the image tests so that both agree on them.
#ifndef MEMVIRT_TESTS_SIM_IMAGE_ARGS_H_
#define MEMVIRT_TESTS_SIM_IMAGE_ARGS_H_

namespace memsim_test {

struct alignas(16) Float4 {
  float x, y, z, w;
};
struct alignas(16) Double2 {
  double x, y;
};
struct Bytes3 {
  char c[3];
};
struct alignas(16) Aligned16 {
  int a;
  int b;
};

// What aligned16(...) writes to out[0].
inline double Aligned16Sum(int a, const Float4& b, const Bytes3& c, const Double2& d, char e,
                           const Aligned16& f, short g) {
  return a + b.x + b.w + c.c[2] + d.x + d.y + e + f.a + f.b + g;
}

}  // namespace memsim_test

#endif  // MEMVIRT_TESTS_SIM_IMAGE_ARGS_H_
