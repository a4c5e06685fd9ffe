// Fake quantization of LibTorch tensors through the FP4 kernels (kernels/), with the
// straight-through or clipped straight-through gradient, calibration of the per-tensor amax, and
// the error statistics of docs/numerics.md. The forward is the kernels' fused quantize-dequantize,
// bit-identical to dequantizing what fp4_quantize (and so an exporter) writes.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fp4lab/kernels/fp4.h"
#include "model/quant_linear.h"

namespace fp4lab::quant {

enum class Backward {
  StraightThrough,         // the gradient passes unchanged
  ClippedStraightThrough,  // zero where |x| > the calibrated amax (ModelOpt's NVFP4 default)
};

// Fake-quantizes x along its last dimension (which must be a multiple of the block size): any
// floating dtype, CPU or CUDA, any leading shape. `amax` is the NVFP4 per-tensor amax (< 0: measure
// it from x; MXFP4 ignores it). Returns x's dtype, or `resultType` BF16 for an fp32 x: the fp32
// result rounded once to BF16 (what a cast after it gives, without the fp32 tensor). No autograd.
// Optional outputs: whole-tensor statistics (merged into *stats) and per-block squared errors
// (fp32 [rows * cols / block], on x's device), and max |x| over the finite elements.
torch::Tensor fakeQuantize(const torch::Tensor& x, const fp4_config& config, float amax,
                           fp4_error_stats* stats = nullptr, torch::Tensor* blockSqErr = nullptr,
                           float* inputAbsMax = nullptr,
                           std::optional<torch::ScalarType> resultType = std::nullopt);

// Drops the calling thread's memo of the last fake-quantized input (see FakeQuantizer::apply):
// releases the tensors it holds. Harmless to call at any time.
void forgetSharedInput();

class FakeQuantizer;

// The weight quantizers of layers that the inference engines fuse into one GEMM (q/k/v_proj,
// gate/up_proj, w1/w3; fp4lab/export/fused_groups.h): with NVFP4 they share one tensor scale, from
// the members' largest weight amax, as the export writes it (weight_scale_2 = amax / 2688).
// Members are held weakly (the layers own their quantizers, which own this).
class SharedTensorScale {
 public:
  void add(const std::shared_ptr<FakeQuantizer>& quantizer, const model::QuantLinear& linear);
  size_t size() const { return m_members.size(); }
  // Frozen: the largest calibrated amax (NaN if a member is not calibrated); dynamic: the largest
  // max |w| over the finite elements of the members' current weights (measured once per weight
  // version).
  float amax(bool frozen) const;

 private:
  struct Member {
    std::weak_ptr<FakeQuantizer> quantizer;
    std::weak_ptr<model::QuantLinearImpl> linear;
    mutable const void* data = nullptr;
    mutable int64_t version = -1;
    mutable float amax = NAN;
  };
  std::vector<Member> m_members;
};

// The quantizer QuantLinear calls for its weight or its input.
class FakeQuantizer : public model::TensorQuantizer {
 public:
  enum class Role { Weight, Input };
  FakeQuantizer(fp4_config config, Backward backward, Role role, bool frozenAmax);

  // Fake quantization with the configured gradient. While calibrating it records max |x| and
  // returns x unchanged. Without gradients, a weight's result is cached until the weight changes
  // (generation reuses it for every token). Input quantizers with the same settings that see the
  // same tensor one after another (q/k/v_proj, gate/up_proj) share one computation.
  torch::Tensor apply(const torch::Tensor& x) override;

  // Calibration: between begin and end, apply() records the running max of |x| (max calibration)
  // and passes x through; end() freezes it as the tensor amax.
  void beginCalibration();
  void endCalibration();
  // The calibrated amax (NaN before calibration). Frozen quantizers use it; the others let the
  // kernels measure it per call.
  float amax() const { return m_amax; }
  void setAmax(float amax) { m_amax = amax; }
  bool frozenAmax() const { return m_frozen; }
  // A weight quantizer's fused group (null: its own tensor scale).
  void setSharedScale(std::shared_ptr<SharedTensorScale> shared) { m_shared = std::move(shared); }
  const std::shared_ptr<SharedTensorScale>& sharedScale() const { return m_shared; }
  // The NVFP4 tensor amax a weight is fake-quantized with now: the group's when it has one, else
  // the calibrated amax (frozen) or -1 (dynamic: the kernels measure the tensor itself).
  float tensorAmax() const;

  // Measurement (input quantizers): while on, apply() merges its error statistics into stats().
  void setMeasuring(bool on);
  const fp4_error_stats& stats() const { return m_stats; }
  // A data-parallel evaluation's statistics over every rank's shard (run/runner.cpp reduces them).
  void setStats(const fp4_error_stats& stats) { m_stats = stats; }

  const fp4_config& config() const { return m_config; }
  Backward backward() const { return m_backward; }
  Role role() const { return m_role; }

 private:
  float effectiveAmax() const;

  fp4_config m_config;
  Backward m_backward;
  Role m_role;
  bool m_frozen;
  bool m_calibrating = false;
  bool m_measuring = false;
  float m_amax = NAN;
  fp4_error_stats m_stats{};
  std::shared_ptr<SharedTensorScale> m_shared;
  // No-grad cache of a weight's fake-quantized value.
  const void* m_cachedData = nullptr;
  int64_t m_cachedVersion = -1;
  float m_cachedAmax = NAN;
  torch::Tensor m_cached;
};

}  // namespace fp4lab::quant
