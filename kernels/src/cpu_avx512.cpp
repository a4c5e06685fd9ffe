// The vector kernels compiled for AVX-512 (F/BW/DQ/VL; chosen at run time).
#define FP4LAB_SIMD_NS avx512
#define FP4LAB_SIMD_NAME "avx512"
#include "cpu_simd.inl"

namespace fp4lab::kernels {
const BackendOps* avx512Backend() {
  return &avx512::ops();
}
}  // namespace fp4lab::kernels
