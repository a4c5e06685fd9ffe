// FakeQuantizer: the kernels' fused fake quantization as a LibTorch autograd function.
#include "quant/fake_quant.h"

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "fp4lab/error.h"
#include "model/fused_loops.h"
#ifdef FP4LAB_HAVE_CUDA_KERNELS
#include "fp4lab/kernels/fp4_cuda.h"
#endif

namespace fp4lab::quant {

namespace {

// The kernels' element type of a tensor that is BF16 or fp32.
fp4_dtype fp4Type(torch::ScalarType t) {
  return t == torch::kBFloat16 ? FP4_DTYPE_BF16 : FP4_DTYPE_F32;
}

// Fake quantization of a CPU tensor whose input or output is BF16 (or whose max |x| is wanted),
// a few rows at a time on LibTorch's threads (the pieces are too small to wake the kernels' own
// pool, which would compete with LibTorch's still-spinning workers: slower in bench_qat_inputs).
// The kernels widen each element as they load it, round the fp32 result once as they store it
// (what a cast after fp32 fake quantization gives) and measure max |x| from the block maxima they
// compute anyway: one read and one write of the tensor, no widening or narrowing copy and no
// separate amax pass. Per row (and 16-row tile) the kernels compute what they compute on the
// whole tensor (stochastic rounding is keyed by the element's index: each piece offsets it), so
// the result is bit-identical. Needs the tensor amax up front (NVFP4) and no statistics.
torch::Tensor fakeQuantizeInPieces(const torch::Tensor& x, const fp4_config& config, float amax,
                                   int64_t rows, int64_t cols, float* inputAbsMax,
                                   torch::ScalarType outType) {
  const torch::Tensor in = x.contiguous();
  torch::Tensor out = torch::empty(in.sizes(), in.options().dtype(outType));
  // ~32 K elements per piece; a multiple of 16 rows keeps 16x16 tiles whole.
  const int64_t pieceRows = std::max<int64_t>(16, (32768 / cols) / 16 * 16);
  const int64_t pieces = (rows + pieceRows - 1) / pieceRows;
  if (inputAbsMax) *inputAbsMax = 0;
  if (pieces == 0) return out.view(x.sizes());
  std::vector<float> pieceAbsMax(static_cast<size_t>(pieces), 0.0f);
  std::vector<std::string> pieceError(static_cast<size_t>(pieces));  // errors are per thread
  const auto* inBytes = static_cast<const char*>(in.data_ptr());
  auto* outBytes = static_cast<char*>(out.data_ptr());
  const int64_t inSize = int64_t(in.element_size()), outSize = int64_t(out.element_size());
  at::parallel_for(0, pieces, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t r0 = p * pieceRows;
      fp4_config piece = config;
      piece.seed_offset += uint64_t(r0 * cols);
      if (fp4_fake_quantize_typed(&piece, inBytes + r0 * cols * inSize, fp4Type(in.scalar_type()),
                                  std::min(pieceRows, rows - r0), cols, amax,
                                  outBytes + r0 * cols * outSize, fp4Type(outType),
                                  inputAbsMax ? &pieceAbsMax[size_t(p)] : nullptr) != FP4_OK)
        pieceError[size_t(p)] = fp4_last_error();
    }
  });
  for (const std::string& e : pieceError)
    if (!e.empty()) throw Error(e, "quant");
  if (inputAbsMax) *inputAbsMax = *std::max_element(pieceAbsMax.begin(), pieceAbsMax.end());
  return out.view(x.sizes());
}

}  // namespace

torch::Tensor fakeQuantize(const torch::Tensor& x, const fp4_config& config, float amax,
                           fp4_error_stats* stats, torch::Tensor* blockSqErr, float* inputAbsMax,
                           std::optional<torch::ScalarType> resultType) {
  const int64_t block = fp4_block_size(config.format);
  if (!x.defined() || x.dim() < 1 || !x.is_floating_point())
    throw Error("fake quantization needs a floating-point tensor", "quant");
  const int64_t cols = x.size(-1);
  if (cols == 0 || cols % block != 0)
    throw Error("the last dimension (" + std::to_string(cols) + ") is not a multiple of the " +
                    std::to_string(block) + "-element block",
                "quant", "exclude this layer from quantization (quant.exclude)");
  const int64_t rows = x.numel() / cols;
  const torch::ScalarType outType = resultType.value_or(x.scalar_type());
  if (outType != x.scalar_type() &&
      !(outType == torch::kBFloat16 && x.scalar_type() == torch::kFloat))
    throw Error("fake quantization returns its input's dtype, or BF16 for an fp32 input", "quant");
  const bool pieceTypes =
      x.scalar_type() == torch::kBFloat16 ||
      (x.scalar_type() == torch::kFloat && (inputAbsMax || outType == torch::kBFloat16));
  if (x.is_cpu() && !stats && !blockSqErr && pieceTypes) {
    const torch::Tensor in = x.contiguous();
    // NVFP4 measuring its own amax: the kernels' measuring pass over the whole tensor first (what
    // they would measure), which the pieces then share.
    if (amax < 0 && config.format == FP4_FORMAT_NVFP4 &&
        fp4_fake_quantize_typed(&config, in.data_ptr(), fp4Type(in.scalar_type()), rows, cols,
                                -1.0f, nullptr, FP4_DTYPE_F32, &amax) != FP4_OK)
      throw Error(fp4_last_error(), "quant");
    return fakeQuantizeInPieces(in, config, amax, rows, cols, inputAbsMax, outType);
  }
  torch::Tensor in = x.to(torch::kFloat).contiguous();
  torch::Tensor out = torch::empty_like(in);
  float* blocks = nullptr;
  if (blockSqErr) {
    *blockSqErr = torch::empty({rows * cols / block}, in.options());
    blocks = blockSqErr->data_ptr<float>();
  }
  fp4_error_stats local;
  fp4_stats_clear(&local);
  fp4_status status;
  if (in.is_cpu()) {
    if (inputAbsMax) *inputAbsMax = fp4_tensor_amax(in.data_ptr<float>(), in.numel());
    status = fp4_fake_quantize(&config, in.data_ptr<float>(), rows, cols, amax,
                               out.data_ptr<float>(), stats ? &local : nullptr, blocks, nullptr);
  } else if (in.is_cuda()) {
#ifdef FP4LAB_HAVE_CUDA_KERNELS
    // The legacy default stream: LibTorch's work on it (and on blocking streams) is ordered.
    status = inputAbsMax
                 ? fp4_cuda_tensor_amax(in.data_ptr<float>(), in.numel(), inputAbsMax, nullptr)
                 : FP4_OK;
    if (status == FP4_OK)
      status = fp4_cuda_fake_quantize(&config, in.data_ptr<float>(), rows, cols, amax,
                                      out.data_ptr<float>(), stats ? &local : nullptr, blocks,
                                      nullptr, nullptr);
#else
    throw Error("this fp4lab was built without the CUDA kernels", "quant",
                "configure with -DFP4LAB_CUDA=ON (the cuda preset)");
#endif
  } else {
    throw Error("fake quantization runs on CPU and CUDA tensors only", "quant");
  }
  if (status != FP4_OK) throw Error(fp4_last_error(), "quant");
  if (stats) fp4_stats_merge(stats, &local);
  if (outType != torch::kFloat) out = out.to(outType);
  return out.view(x.sizes());
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// The gradient of y = fakeQuantize(x): dy/dx = 1 (straight-through) or 1 where |x| <= amax
// (clipped). y is computed without autograd (quantized() below) and handed to this node, which
// returns a view of it: each reader of one computed result (q/k/v_proj reading one input) gets its
// own node, so their gradients meet at x, in x's dtype, not at y, whose dtype may be BF16 (an fp32
// result narrowed for a BF16 linear, which a cast after it would give: autocast's casts sum the
// readers' gradients in fp32 too). `clip` < 0: no mask (straight-through, or nothing exceeded the
// amax, as usual with a calibrated amax); else the mask's amax, and x is kept for it. A shared
// input's mask is a node of its own (y = x) in front of the readers', so that it is applied once,
// to their sum. (Non-finite inputs are not masked; the training loop stops on the non-finite loss
// they cause.)
class StraightThroughFunction : public torch::autograd::Function<StraightThroughFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& y,
                               double clip) {
    ctx->saved_data["clip"] = clip;
    ctx->saved_data["x_type"] = static_cast<int64_t>(x.scalar_type());
    if (clip >= 0) ctx->save_for_backward({x});
    return y.view(y.sizes());
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list gradOutputs) {
    const auto xType = static_cast<torch::ScalarType>(ctx->saved_data["x_type"].toInt());
    torch::Tensor grad = gradOutputs[0].to(xType);
    const double clip = ctx->saved_data["clip"].toDouble();
    if (clip >= 0) grad = clipGradient(grad, ctx->get_saved_variables()[0], float(clip));
    return {grad, torch::Tensor(), torch::Tensor()};
  }

 private:
  // grad where |x| <= clip, else 0: one fused pass on CPU (fp32 or bf16), torch ops elsewhere.
  static torch::Tensor clipGradient(const torch::Tensor& grad, const torch::Tensor& x, float clip) {
    if (!grad.is_cpu() || !x.is_cpu() || grad.sizes() != x.sizes() ||
        grad.scalar_type() != x.scalar_type() ||
        (x.scalar_type() != torch::kFloat && x.scalar_type() != torch::kBFloat16))
      return grad.masked_fill(x.abs() > clip, 0);
    torch::Tensor g = grad.contiguous(), v = x.contiguous();
    torch::Tensor out = torch::empty_like(g);
    const model::fused::Type type =
        g.scalar_type() == torch::kFloat ? model::fused::Type::F32 : model::fused::Type::BF16;
    const int64_t elementSize = int64_t(g.element_size());
    const auto* gp = static_cast<const char*>(g.data_ptr());
    const auto* xp = static_cast<const char*>(v.data_ptr());
    auto* op = static_cast<char*>(out.data_ptr());
    at::parallel_for(0, g.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
      model::fused::clipGradient(type, gp + begin * elementSize, xp + begin * elementSize, clip,
                                 op + begin * elementSize, end - begin);
    });
    return out;
  }
};

// The last input fake-quantized, and its result (without autograd). Layers that read one tensor
// (q/k/v_proj, gate/up_proj) calibrate to the same amax, so their quantizers compute the same
// result: the second and third reuse it, each through its own straight-through node. The input is
// held, so its address cannot be reused by another tensor while it is the key.
struct LastInput {
  torch::Tensor input, output;
  torch::Tensor reader;  // what the readers' nodes take as their input: x, or x's clipping node
  int64_t version = -1;
  fp4_config config{};
  float amax = NAN;
  bool clipped = false, grad = false, measured = false;
  fp4_error_stats stats{};  // of this computation, when measured

  bool matches(const torch::Tensor& x, const fp4_config& c, float a, bool clip, bool g) const {
    return input.defined() && input.unsafeGetTensorImpl() == x.unsafeGetTensorImpl() &&
           version == x._version() && std::memcmp(&config, &c, sizeof c) == 0 &&
           (amax == a || (std::isnan(amax) && std::isnan(a))) && clipped == clip && grad == g;
  }
};
thread_local LastInput t_lastInput;

// max |w| over the finite elements, as the kernels measure a tensor amax: the kernels' one
// vectorized pass for a CPU fp32 tensor (a master weight, every step of QAT), torch ops otherwise.
float finiteAbsMax(const torch::Tensor& weight) {
  const torch::Tensor w = weight.detach();
  if (w.is_cpu() && w.scalar_type() == torch::kFloat && w.is_contiguous())
    return fp4_tensor_amax(w.data_ptr<float>(), w.numel());
  torch::NoGradGuard noGrad;
  torch::Tensor abs = w.abs().to(torch::kFloat);
  abs = torch::where(torch::isfinite(abs), abs, torch::zeros_like(abs));
  return abs.numel() ? abs.max().item<float>() : 0.0f;
}

}  // namespace

void forgetSharedInput() {
  t_lastInput = LastInput();
}

FakeQuantizer::FakeQuantizer(fp4_config config, Backward backward, Role role, bool frozenAmax)
    : m_config(config), m_backward(backward), m_role(role), m_frozen(frozenAmax) {
  fp4_stats_clear(&m_stats);
}

void FakeQuantizer::beginCalibration() {
  m_calibrating = true;
  m_amax = 0;
}

void FakeQuantizer::endCalibration() {
  m_calibrating = false;
  // A calibrated NVFP4 amax moves up to the nearest value (a few ulps at most) that an export
  // writes exactly in both layouts: compressed-tensors' 2688 / amax does not say which of two
  // neighbouring amaxes it came from, and for activations the other one quantizes differently.
  if (m_frozen && m_config.format == FP4_FORMAT_NVFP4) m_amax = fp4_nvfp4_exportable_amax(m_amax);
}

void FakeQuantizer::setMeasuring(bool on) {
  m_measuring = on;
  if (on) fp4_stats_clear(&m_stats);
}

void SharedTensorScale::add(const std::shared_ptr<FakeQuantizer>& quantizer,
                            const model::QuantLinear& linear) {
  Member m;
  m.quantizer = quantizer;
  m.linear = linear.ptr();
  m_members.push_back(std::move(m));
}

float SharedTensorScale::amax(bool frozen) const {
  float out = 0;
  for (const Member& m : m_members) {
    float a = NAN;
    if (frozen) {
      const std::shared_ptr<FakeQuantizer> q = m.quantizer.lock();
      if (!q) continue;
      a = q->amax();
    } else {
      const std::shared_ptr<model::QuantLinearImpl> linear = m.linear.lock();
      if (!linear) continue;
      const torch::Tensor& w = linear->weight;
      if (m.data != w.data_ptr() || m.version != w._version()) {
        m.amax = finiteAbsMax(w);
        m.data = w.data_ptr();
        m.version = w._version();
      }
      a = m.amax;
    }
    if (!std::isfinite(a)) return NAN;
    out = std::max(out, a);
  }
  return out;
}

float FakeQuantizer::tensorAmax() const {
  if (m_shared) return m_shared->amax(m_frozen);
  return m_frozen ? m_amax : -1.0f;
}

float FakeQuantizer::effectiveAmax() const {
  if (m_frozen) {
    const float amax = m_shared ? m_shared->amax(true) : m_amax;
    if (!std::isfinite(amax))
      throw Error("a frozen-amax quantizer was used before calibration", "quant",
                  "calibrate first (quant.calib_batches >= 1) or set quant.amax=dynamic");
    return amax;
  }
  // Dynamic: the group's largest amax now, or -1: the kernels measure the tensor per call (and
  // nothing is clipped beyond it).
  return m_shared ? m_shared->amax(false) : -1.0f;
}

namespace {

// What a quantizer hands its linear layer: under BF16 autocast on the CPU the linear computes in
// BF16 and would cast an fp32 result first (once per reader: q/k/v_proj cast one input three
// times), so the pieces narrow it as they store it instead: the same bits, one pass over memory
// fewer, and no casts. Otherwise x's own dtype.
std::optional<torch::ScalarType> resultType(const torch::Tensor& x) {
  if (x.is_cpu() && x.scalar_type() == torch::kFloat &&
      at::autocast::is_autocast_enabled(at::kCPU) &&
      at::autocast::get_autocast_dtype(at::kCPU) == at::kBFloat16)
    return torch::kBFloat16;
  return std::nullopt;
}

// x fake-quantized without autograd, and the clipped gradient's mask amax for
// StraightThroughFunction (-1: no mask). The clipped case measures max |x| in the same pass
// (vectorized): when nothing exceeds amax the backward needs no mask.
struct Quantized {
  torch::Tensor y;
  double clip = -1;
};
Quantized quantized(const torch::Tensor& x, const fp4_config& config, float amax, bool clipped,
                    bool grad, fp4_error_stats* stats, std::optional<torch::ScalarType> outType) {
  torch::NoGradGuard noGrad;
  const bool clip = grad && clipped && std::isfinite(amax) && amax >= 0;
  float inputAbsMax = 0;
  Quantized q;
  q.y = fakeQuantize(x, config, amax, stats, nullptr, clip ? &inputAbsMax : nullptr, outType);
  if (clip && inputAbsMax > amax) q.clip = amax;
  return q;
}

}  // namespace

torch::Tensor FakeQuantizer::apply(const torch::Tensor& x) {
  if (m_calibrating) {
    m_amax = std::max(m_amax, x.detach().abs().max().item<float>());
    return x;
  }
  const float amax = effectiveAmax();
  const std::optional<torch::ScalarType> outType = resultType(x);
  const bool clipped = m_backward == Backward::ClippedStraightThrough;
  const bool grad = torch::GradMode::is_enabled() && x.requires_grad();
  if (m_role == Role::Input) {
    LastInput& last = t_lastInput;
    if (!last.matches(x, m_config, amax, clipped, grad) || (m_measuring && !last.measured) ||
        last.output.scalar_type() != outType.value_or(x.scalar_type())) {
      last = LastInput();
      fp4_stats_clear(&last.stats);
      // Statistics cost a slower kernel path: only while someone measures.
      const Quantized q =
          quantized(x, m_config, amax, clipped, grad, m_measuring ? &last.stats : nullptr, outType);
      last.output = q.y;
      // A mask, when there is one, once on the readers' summed gradient.
      last.reader = grad && q.clip >= 0 ? StraightThroughFunction::apply(x, x.detach(), q.clip) : x;
      last.measured = m_measuring;
      last.input = x;
      last.version = x._version();
      last.config = m_config;
      last.amax = amax;
      last.clipped = clipped;
      last.grad = grad;
    }
    if (m_measuring) fp4_stats_merge(&m_stats, &last.stats);
    // Each reader its own node.
    return grad ? StraightThroughFunction::apply(last.reader, last.output, -1) : last.output;
  }
  if (grad) {
    m_cached = torch::Tensor();
    const Quantized q = quantized(x, m_config, amax, clipped, true, nullptr, outType);
    return StraightThroughFunction::apply(x, q.y, q.clip);
  }
  // A weight unchanged since the last no-grad call (same storage, same version): reuse it.
  if (m_cached.defined() && m_cachedData == x.data_ptr() && m_cachedVersion == x._version() &&
      m_cachedAmax == amax && m_cached.scalar_type() == outType.value_or(x.scalar_type()))
    return m_cached;
  m_cached = fakeQuantize(x, m_config, amax, nullptr, nullptr, nullptr, outType);
  m_cachedData = x.data_ptr();
  m_cachedVersion = x._version();
  m_cachedAmax = amax;
  return m_cached;
}

}  // namespace fp4lab::quant
