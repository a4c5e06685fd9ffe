// The linear layers that the inference engines (vLLM, SGLang, TensorRT-LLM) fuse into one GEMM,
// and so give one NVFP4 tensor scale: q/k/v_proj of an attention block, gate/up_proj of an MLP,
// Mixtral's w1/w3 of an expert. One definition for the exporter (which writes the shared
// weight_scale_2) and the fake quantization (which trains and evaluates with it). Plain C++.
#pragma once

#include <string>

namespace fp4lab::exporter {

// "<parent>/qkv", "<parent>/gate_up" or "<parent>/w13" for a module name such as
// model.layers.0.self_attn.q_proj; empty for a layer that is not fused with others.
inline std::string fusedGroupOf(const std::string& module) {
  const size_t dot = module.rfind('.');
  const std::string parent = dot == std::string::npos ? "" : module.substr(0, dot);
  const std::string leaf = dot == std::string::npos ? module : module.substr(dot + 1);
  if (leaf == "q_proj" || leaf == "k_proj" || leaf == "v_proj") return parent + "/qkv";
  if (leaf == "gate_proj" || leaf == "up_proj") return parent + "/gate_up";
  if (leaf == "w1" || leaf == "w3") return parent + "/w13";
  return {};
}

}  // namespace fp4lab::exporter
