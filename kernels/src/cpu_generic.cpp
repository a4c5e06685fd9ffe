// The vector kernels compiled for baseline x86-64 (SSE2): the fallback on any CPU.
#define FP4LAB_SIMD_NS generic
#define FP4LAB_SIMD_NAME "generic"
#include "cpu_simd.inl"

namespace fp4lab::kernels {
const BackendOps& genericBackend() {
  return generic::ops();
}
}  // namespace fp4lab::kernels
