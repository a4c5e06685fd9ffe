// Packing tokenized examples into fixed-length training sequences (inputs and shifted targets in
// one array, with the loss mask aligned to the targets).
#pragma once

#include <cstdint>
#include <vector>

#include "fp4lab/data/chat_template.h"

namespace fp4lab::data {

// seqLen + 1 ids: the model reads ids[0..seqLen) and is scored on ids[1..seqLen] where lossMask
// is 1 (lossMask[i] refers to ids[i] as a target; lossMask[0] is always 0).
struct Sequence {
  std::vector<int32_t> ids;
  std::vector<uint8_t> lossMask;
};

// pack = true: examples are concatenated into one stream, in order, and cut into windows that
// start every seqLen tokens and overlap by one, so every stream token except the very first is a
// target in exactly one window (the window's first token is only an input). The last window is
// padded. Across an example boundary nothing is trained: the first token of every example gets
// mask 0, so the model is never scored on predicting one example from the previous one (attention
// still spans both; there is no per-document attention mask).
// pack = false: one sequence per example, truncated to seqLen + 1 tokens or padded.
// Padding is padId with mask 0. Sequences without a single target are dropped in both modes.
// Throws fp4lab::Error when seqLen < 1 or an example's ids and mask differ in length.
std::vector<Sequence> packSequences(const std::vector<TokenizedExample>& examples, int seqLen,
                                    int32_t padId, bool pack);

}  // namespace fp4lab::data
