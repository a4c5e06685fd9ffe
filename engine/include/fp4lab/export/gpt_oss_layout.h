// gpt-oss's experts tensors in Hugging Face's layout: which tensors they are, and their weights
// as the quantized rows [E * out, in] (blocks along each expert's input) from the stored
// [E, in, out]. One definition for the exporter, fp4lab analyze and the export dialog (the
// engine's model sees the same rows through [E, out, in] views). Plain C++.
#pragma once

#include <cstdint>
#include <string>

namespace fp4lab::exporter {

// <prefix>.mlp.experts.gate_up_proj [E, H, 2I] or <prefix>.mlp.experts.down_proj [E, I, H].
inline bool isExpertsTensor(const std::string& name, size_t dims) {
  const auto endsWith = [&](const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return dims == 3 && (endsWith(".mlp.experts.gate_up_proj") || endsWith(".mlp.experts.down_proj"));
}

// in [E, inputs, outputs] -> out [E, outputs, inputs].
inline void expertsToRows(const float* in, int64_t experts, int64_t inputs, int64_t outputs,
                          float* out) {
  for (int64_t e = 0; e < experts; ++e) {
    const float* src = in + e * inputs * outputs;
    float* dst = out + e * outputs * inputs;
    for (int64_t i = 0; i < inputs; ++i)
      for (int64_t o = 0; o < outputs; ++o) dst[o * inputs + i] = src[i * outputs + o];
  }
}

}  // namespace fp4lab::exporter
