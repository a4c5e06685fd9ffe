// QuantLinear: torch::linear with optional weight and input quantizers in front of it.
#include "model/quant_linear.h"

#include "model/fused_ops.h"

#include <cmath>

namespace fp4lab::model {

QuantLinearImpl::QuantLinearImpl(int64_t in, int64_t out, bool hasBias,
                                 const torch::TensorOptions& options, bool initialize) {
  weight = register_parameter("weight", torch::empty({out, in}, options));
  if (hasBias) bias = register_parameter("bias", torch::empty({out}, options));
  if (initialize) {
    torch::NoGradGuard noGrad;
    // torch::nn::Linear's reset_parameters: kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(in), ..).
    const double bound = in > 0 ? 1.0 / std::sqrt(static_cast<double>(in)) : 0.0;
    weight.uniform_(-bound, bound);
    if (hasBias) bias.uniform_(-bound, bound);
  }
}

QuantLinearImpl::QuantLinearImpl(torch::Tensor sharedWeight) : weight(std::move(sharedWeight)) {}

torch::Tensor QuantLinearImpl::effectiveWeight() {
  return weightQuantizer ? weightQuantizer->apply(weight) : weight;
}

torch::Tensor QuantLinearImpl::forward(const torch::Tensor& x) {
  const torch::Tensor input = inputQuantizer ? inputQuantizer->apply(x) : x;
  return model::linear(input, effectiveWeight(), bias);
}

void QuantLinearImpl::pretty_print(std::ostream& stream) const {
  stream << "QuantLinear(in=" << inFeatures() << ", out=" << outFeatures()
         << ", bias=" << (bias.defined() ? "true" : "false")
         << ", weightQuantizer=" << (weightQuantizer ? "on" : "off")
         << ", inputQuantizer=" << (inputQuantizer ? "on" : "off") << ")";
}

}  // namespace fp4lab::model
