// Argument checks shared by the CPU front end (dispatch.cpp) and the CUDA one (fp4_cuda.cu), so
// both refuse the same inputs with the same messages (set for fp4_last_error()).
#pragma once

#include <stdint.h>

#include "fp4lab/kernels/fp4.h"

namespace fp4lab::kernels {

fp4_status validateConfig(const fp4_config* cfg);
fp4_status validateShape(const fp4_config* cfg, int64_t rows, int64_t cols);

}  // namespace fp4lab::kernels
