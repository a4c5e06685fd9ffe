// The FP4 kernel API on GPU buffers: the operations of fp4.h over device pointers, computing
// the same bits as the CPU reference. Built only with FP4LAB_CUDA=ON; needs no CUDA header.
#pragma once

#include "fp4lab/kernels/fp4.h"

#ifdef __cplusplus
extern "C" {
#endif

// Conventions shared by every function below:
// - x, y, codes, scales, block_sq_err and block_amax are device pointers (cudaMalloc, managed
//   or mapped host memory) on the current device; a plain host pointer is FP4_ERR_ARGUMENT.
// - `stream` is a cudaStream_t (NULL: the default stream). Work is queued on it and the call
//   returns without waiting, except where a host output needs a result computed on the GPU:
//   then the call waits for the stream (stats, or a measured NVFP4 global scale).
// - Argument errors use the same codes and checks as fp4.h; FP4_ERR_UNAVAILABLE when no CUDA
//   device is usable; FP4_ERR_CUDA when a CUDA call fails. fp4_last_error() explains each.
//   A kernel fault surfaces at a later synchronizing call (CUDA reports it asynchronously).
// - Results are bit-identical to fp4.h's (codes, scales, y, block_amax; NaN outputs carry the
//   bits the CPU writes). Statistics sums and block_sq_err are summed in double in another
//   order, so they agree to rounding; counts are exact. Only fp4_cuda_hadamard16 of NaN or Inf
//   inputs may give other NaN bits than the CPU.

// Number of usable CUDA devices; 0 (never an error or a crash) without a driver or a GPU.
int fp4_cuda_device_count(void);

// Max |x| over the finite elements of `count` floats (NaN and Inf are skipped); 0 for an
// empty tensor. *amax is a host float; the call waits for the stream.
fp4_status fp4_cuda_tensor_amax(const float* x, int64_t count, float* amax, void* stream);

// As fp4_quantize: codes (rows*cols/2 bytes) and scales (rows*cols/block bytes) on the device.
// NVFP4 with tensor_amax < 0 measures the amax on the GPU (after the Hadamard rotation when
// cfg->hadamard); *global_scale (host, may be NULL) then costs a wait for the stream. With a
// given tensor_amax, or global_scale NULL, the call does not wait.
fp4_status fp4_cuda_quantize(const fp4_config* cfg, const float* x, int64_t rows, int64_t cols,
                             float tensor_amax, uint8_t* codes, uint8_t* scales,
                             float* global_scale, void* stream);

// As fp4_dequantize: y (rows*cols floats) on the device. Does not wait.
fp4_status fp4_cuda_dequantize(const fp4_config* cfg, const uint8_t* codes, const uint8_t* scales,
                               float global_scale, int64_t rows, int64_t cols, float* y,
                               void* stream);

// As fp4_fake_quantize: y, block_sq_err and block_amax (rows*cols/block each) on the device,
// any of them NULL; `stats` is a host struct (may be NULL; when set, the call waits). y may
// alias x.
fp4_status fp4_cuda_fake_quantize(const fp4_config* cfg, const float* x, int64_t rows, int64_t cols,
                                  float tensor_amax, float* y, fp4_error_stats* stats,
                                  float* block_sq_err, float* block_amax, void* stream);

// As fp4_hadamard16, on the device. y may alias x. Does not wait.
fp4_status fp4_cuda_hadamard16(const float* x, int64_t rows, int64_t cols, int inverse, float* y,
                               void* stream);

#ifdef __cplusplus
}
#endif
