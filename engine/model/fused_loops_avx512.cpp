// The fused loops built for AVX512 (compiler flags in engine/CMakeLists.txt).
#define FUSED_ISA avx512
#include "model/fused_loops.inl"
