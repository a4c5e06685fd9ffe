// The interface every CPU backend implements: row-range kernels over one validated job. The
// front end (dispatch.cpp) validates arguments, measures the tensor amax, splits rows into
// fixed chunks (independent of the thread count, so results are too) and merges statistics.
#pragma once

#include "fp4lab/kernels/fp4.h"
#include "fp4lab/kernels/formats.h"

namespace fp4lab::kernels {

struct Job {
  fp4_config cfg;
  int64_t rows = 0;
  int64_t cols = 0;
  int block = 0;             // 32 (MXFP4) or 16 (NVFP4)
  float globalScale = 1.0f;  // NVFP4 s2
  const float* x = nullptr;
  float* y = nullptr;
  const uint8_t* codesIn = nullptr;
  const uint8_t* scalesIn = nullptr;
  uint8_t* codes = nullptr;
  uint8_t* scales = nullptr;
  float* blockSqErr = nullptr;
  float* blockAmax = nullptr;
  // fakeQuantizeTyped: a BF16 input (raw bits) in place of x, a BF16 output in place of y.
  const uint16_t* xBf16 = nullptr;
  uint16_t* yBf16 = nullptr;
};

// Whether the blocks of a row range are consecutive runs of elements fake-quantized with
// nearest rounding: no 16x16 tiles and no rotation (the backends' fast paths).
inline bool flatBlocks(const fp4_config& cfg) {
  return !cfg.nvfp4_2d_blocks && !cfg.hadamard && cfg.rounding == FP4_ROUNDING_NEAREST_EVEN;
}

// Row ranges handed to a backend are multiples of 16 rows (except the tensor's last chunk),
// so NVFP4 16x16 tiles never straddle two calls.
struct BackendOps {
  const char* name;
  void (*quantize)(const Job& job, int64_t row0, int64_t row1);
  void (*dequantize)(const Job& job, int64_t row0, int64_t row1);
  // `partial` is null when the caller wants no statistics.
  void (*fakeQuantize)(const Job& job, int64_t row0, int64_t row1, fp4_error_stats* partial);
  // Max |.| over finite values of rows [row0, row1), after the Hadamard rotation if asked.
  float (*amax)(const Job& job, int64_t row0, int64_t row1, bool hadamard);
  void (*hadamard)(const float* x, float* y, int64_t count, bool inverse);  // count % 16 == 0
  // Optional (null where not implemented): fake quantization of the whole NVFP4 tensor without
  // statistics, measuring its tensor amax on the way and setting job.globalScale. Returns false,
  // having done nothing, when the job is not one it handles (the caller then measures the amax
  // and calls fakeQuantize). Called only for tensors of one chunk, on one thread.
  bool (*fakeQuantizeWhole)(Job& job);
  // Optional: fakeQuantize of a flatBlocks job without statistics whose input is job.x or
  // job.xBf16 and output job.y or job.yBf16, converting in registers; *absMax (if not null) gets
  // the max |x| over the rows' finite elements.
  void (*fakeQuantizeTyped)(const Job& job, int64_t row0, int64_t row1, float* absMax);
};

const BackendOps& referenceBackend();
const BackendOps& genericBackend();
const BackendOps* avx2Backend();    // nullptr when not compiled in
const BackendOps* avx512Backend();  // nullptr when not compiled in

}  // namespace fp4lab::kernels
