// The vector kernels compiled for AVX2 (this file is built with -mavx2; chosen at run time).
#define FP4LAB_SIMD_NS avx2
#define FP4LAB_SIMD_NAME "avx2"
#include "cpu_simd.inl"

namespace fp4lab::kernels {
const BackendOps* avx2Backend() {
  return &avx2::ops();
}
}  // namespace fp4lab::kernels
