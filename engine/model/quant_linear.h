// QuantLinear: the one linear layer of every model. Plain (BF16) torch::linear until a recipe
// attaches fake-quantizers to its weight and/or its input.
#pragma once

#include <torch/torch.h>

#include <memory>

namespace fp4lab::model {

// Maps a tensor to its (fake-)quantized version, e.g. an MXFP4 quantize-dequantize with a
// straight-through gradient. Implementations live in engine/quant/.
struct TensorQuantizer {
  virtual ~TensorQuantizer() = default;
  virtual torch::Tensor apply(const torch::Tensor& x) = 0;
};

class QuantLinearImpl : public torch::nn::Module {
 public:
  // weight [out, in] and optional bias [out], allocated with `options` (dtype, device). With
  // `initialize` they get torch::nn::Linear's default init (uniform +-1/sqrt(in)); without it they
  // are left uninitialized for a loader to fill.
  QuantLinearImpl(int64_t in, int64_t out, bool bias, const torch::TensorOptions& options = {},
                  bool initialize = true);
  // A linear over a weight owned by another module (tied embeddings). The weight is not
  // registered here, so named_parameters() lists it once, under its owner's name.
  explicit QuantLinearImpl(torch::Tensor sharedWeight);

  // x' = inputQuantizer ? inputQuantizer->apply(x) : x; w' likewise with weightQuantizer;
  // returns torch::linear(x', w', bias).
  torch::Tensor forward(const torch::Tensor& x);
  // weight' as forward uses it (the weight itself when no quantizer is set).
  torch::Tensor effectiveWeight();

  // A weight may have leading dimensions (gpt-oss's experts: [E, out, in]); blocks run along the
  // last one, and the rows are everything before it.
  int64_t inFeatures() const { return weight.size(-1); }
  int64_t outFeatures() const { return weight.numel() / weight.size(-1); }
  void pretty_print(std::ostream& stream) const override;

  torch::Tensor weight, bias;  // bias undefined when the layer has none
  std::shared_ptr<TensorQuantizer> weightQuantizer, inputQuantizer;  // null = plain linear
};
TORCH_MODULE(QuantLinear);

}  // namespace fp4lab::model
