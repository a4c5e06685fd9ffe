// The fused loops built for AVX2 (compiler flags in engine/CMakeLists.txt).
#define FUSED_ISA avx2
#include "model/fused_loops.inl"
