// The FP4 kernel API: quantize, dequantize, fused fake-quant and error statistics for MXFP4
// and NVFP4 over row-major fp32 matrices, blocks along the last dimension (columns).
// Every backend (reference, generic, AVX2, AVX-512, CUDA) computes the same bits.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
// A fixed underlying type makes any int a valid value, so a bad value read from a config is
// reported as FP4_ERR_ARGUMENT instead of being undefined behaviour.
#define FP4_ENUM(name) enum name : int
#else
#define FP4_ENUM(name) enum name
#endif

typedef FP4_ENUM(fp4_status){
    FP4_OK = 0,
    FP4_ERR_NULL_POINTER,  // a required buffer was NULL
    FP4_ERR_MISALIGNED,    // a float buffer is not 4-byte aligned
    FP4_ERR_SHAPE,         // negative sizes, or columns not a multiple of the block size
    FP4_ERR_ARGUMENT,      // an option value out of range (format, tensor amax, ...)
    FP4_ERR_UNAVAILABLE,   // the requested backend is not built or not supported by this CPU/GPU
    FP4_ERR_CUDA,          // a CUDA call failed (fp4_last_error() has the runtime's message)
} fp4_status;

typedef FP4_ENUM(fp4_format){FP4_FORMAT_MXFP4 = 0, FP4_FORMAT_NVFP4 = 1} fp4_format;

typedef FP4_ENUM(fp4_scale_rule){
    FP4_SCALE_RULE_CEIL = 0,   // smallest e with amax <= 6 * 2^e (ModelOpt, torchao, cuBLAS)
    FP4_SCALE_RULE_FLOOR = 1,  // floor(log2(amax)) - 2 (OCP MX v1.0; clips (6, 8) * 2^e)
} fp4_scale_rule;

typedef FP4_ENUM(fp4_rounding){
    FP4_ROUNDING_NEAREST_EVEN = 0,
    FP4_ROUNDING_STOCHASTIC = 1,  // Philox4x32-10 keyed by `seed`, counter = element index
} fp4_rounding;

typedef FP4_ENUM(fp4_backend){
    FP4_BACKEND_AUTO = 0,  // the fastest available CPU backend
    FP4_BACKEND_REFERENCE = 1, FP4_BACKEND_GENERIC = 2,
    FP4_BACKEND_AVX2 = 3,      FP4_BACKEND_AVX512 = 4,
} fp4_backend;

typedef struct fp4_config {
  fp4_format format;
  fp4_scale_rule scale_rule;  // MXFP4 only
  int nvfp4_2d_blocks;        // NVFP4 only: one scale per 16x16 tile (stored once per row)
  fp4_rounding rounding;
  uint64_t seed;         // stochastic rounding
  uint64_t seed_offset;  // added to the element index (distinct streams per call)
  int hadamard;          // apply the 16x16 random Hadamard transform before quantizing
} fp4_config;

// Whole-tensor error statistics of x against its fake-quantized x'. Sums are in double.
typedef struct fp4_error_stats {
  int64_t count;       // elements measured (finite inputs)
  int64_t clipped;     // |x| beyond the largest representable value of its block
  int64_t flushed;     // x != 0 but x' == 0
  int64_t nonfinite;   // NaN or Inf inputs (excluded from the sums)
  double sum_x2;       // sum x^2
  double sum_err2;     // sum (x - x')^2
  double sum_xq;       // sum x * x'
  double sum_q2;       // sum x'^2
  double max_abs_err;  // max |x - x'|
} fp4_error_stats;

// Derived metrics; NaN where undefined (e.g. SQNR of an all-zero tensor).
double fp4_stats_mse(const fp4_error_stats* s);
double fp4_stats_rel_l2(const fp4_error_stats* s);
double fp4_stats_sqnr_db(const fp4_error_stats* s);
double fp4_stats_cosine(const fp4_error_stats* s);
double fp4_stats_clip_fraction(const fp4_error_stats* s);
double fp4_stats_zero_fraction(const fp4_error_stats* s);
// Combines partial statistics (e.g. of several tensors); `into` must be initialised.
void fp4_stats_merge(fp4_error_stats* into, const fp4_error_stats* from);
void fp4_stats_clear(fp4_error_stats* s);

fp4_config fp4_default_config(fp4_format format);
int fp4_block_size(fp4_format format);  // 32 or 16
// Buffer sizes for a rows x cols tensor (cols must be a multiple of the block size).
int64_t fp4_packed_bytes(int64_t rows, int64_t cols);                    // rows * cols / 2
int64_t fp4_scale_count(fp4_format format, int64_t rows, int64_t cols);  // rows * cols / block

// Max |x| over the finite elements (NaN and Inf are skipped); 0 for an empty tensor.
float fp4_tensor_amax(const float* x, int64_t count);
// NVFP4 global scale s2 = amax / 2688, or 1 when amax == 0 (ModelOpt's weight_scale_2).
float fp4_nvfp4_global_scale(float tensor_amax);
// compressed-tensors writes the reciprocal g = 2688 / amax (one fp32 division). About one g in
// seven is reached by two neighbouring amaxes whose s2 differ in the last bit; this returns the one
// nearest 2688 / g (the file cannot say which it was), 2688 for g == 1, NaN when no amax gives g.
float fp4_nvfp4_amax_from_reciprocal(float g);
// The smallest amax >= tensor_amax (at most a few ulps above) whose reciprocal reads back as
// itself, so that a calibrated activation amax is the same after export in either layout
// (ModelOpt's s2 or compressed-tensors' g). tensor_amax itself when none is found nearby.
float fp4_nvfp4_exportable_amax(float tensor_amax);

// Quantize x (rows x cols) to packed codes (rows*cols/2 bytes) and scale bytes
// (rows*cols/block: E8M0 for MXFP4, E4M3 for NVFP4). NVFP4: `tensor_amax` < 0 means "measure
// it from x"; the global scale used is written to *global_scale (ignored for MXFP4, may be NULL).
fp4_status fp4_quantize(const fp4_config* cfg, const float* x, int64_t rows, int64_t cols,
                        float tensor_amax, uint8_t* codes, uint8_t* scales, float* global_scale);

// Decode codes and scales back to fp32. `global_scale` is ignored for MXFP4.
fp4_status fp4_dequantize(const fp4_config* cfg, const uint8_t* codes, const uint8_t* scales,
                          float global_scale, int64_t rows, int64_t cols, float* y);

// Fused quantize-dequantize: y is bit-identical to fp4_dequantize(fp4_quantize(x)). Any of
// y, stats, block_sq_err (rows*cols/block), block_amax (same) may be NULL; with y NULL this
// only measures. With cfg->hadamard, x is rotated first and y and the statistics are in the
// rotated basis. y may alias x.
fp4_status fp4_fake_quantize(const fp4_config* cfg, const float* x, int64_t rows, int64_t cols,
                             float tensor_amax, float* y, fp4_error_stats* stats,
                             float* block_sq_err, float* block_amax);

// Element types of fp4_fake_quantize_typed's buffers: fp32, or BF16 as raw bits (uint16_t).
typedef FP4_ENUM(fp4_dtype){FP4_DTYPE_F32 = 0, FP4_DTYPE_BF16 = 1} fp4_dtype;

// fp4_fake_quantize with either end in BF16, for a training step's BF16 operands: y is the fp32
// result of fake-quantizing x widened to fp32, rounded to y_type (BF16: to nearest even, as
// LibTorch's casts; the kernels' NaN is 0x7FC00000, so it becomes 0x7FC0), bit for bit. *x_amax
// (may be NULL; 0 on an error) gets fp4_tensor_amax of the widened x; with y NULL this only
// measures. No statistics. y may be x itself when both have the same type; overlapping buffers of
// different types are refused (FP4_ERR_ARGUMENT). The AVX-512 backend converts in registers on its
// fast path (nearest rounding, no 2-D tiles, no rotation); elsewhere rows are widened a chunk at a
// time.
fp4_status fp4_fake_quantize_typed(const fp4_config* cfg, const void* x, fp4_dtype x_type,
                                   int64_t rows, int64_t cols, float tensor_amax, void* y,
                                   fp4_dtype y_type, float* x_amax);

// y = (H/4) diag(d) x per tile of 16 along each row (inverse: diag(d) (H/4) y). cols % 16 == 0.
fp4_status fp4_hadamard16(const float* x, int64_t rows, int64_t cols, int inverse, float* y);

// Backend selection. The environment variable FP4LAB_KERNELS=reference|generic|avx2|avx512
// sets the initial choice; fp4_set_backend overrides it (FP4_BACKEND_REFERENCE forces the
// reference path for debugging and tests).
fp4_status fp4_set_backend(fp4_backend backend);
fp4_backend fp4_get_backend(void);  // the backend calls use now (AUTO resolved)
int fp4_backend_available(fp4_backend backend);
const char* fp4_backend_name(fp4_backend backend);
// Worker threads for large tensors (0 = all hardware threads). Results do not depend on it.
void fp4_set_num_threads(int threads);
int fp4_get_num_threads(void);

const char* fp4_status_string(fp4_status status);
// Thread-local description of the last failure: what, where, and what to do.
const char* fp4_last_error(void);

#ifdef __cplusplus
}
#endif
