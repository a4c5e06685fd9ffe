// Packing tokenized examples into seqLen + 1 windows (overlapping by one token) or one padded
// sequence per example.
#include "fp4lab/data/packing.h"

#include <algorithm>

#include "fp4lab/error.h"

namespace fp4lab::data {
namespace {

bool hasTarget(const std::vector<uint8_t>& mask) {
  return std::any_of(mask.begin() + 1, mask.end(), [](uint8_t m) { return m != 0; });
}

// Copies ids/mask [begin, end) of the stream into a seqLen + 1 sequence, padding the rest.
Sequence window(const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask, size_t begin,
                size_t end, size_t length, int32_t padId) {
  Sequence sequence;
  sequence.ids.assign(ids.begin() + begin, ids.begin() + end);
  sequence.lossMask.assign(mask.begin() + begin, mask.begin() + end);
  sequence.ids.resize(length, padId);
  sequence.lossMask.resize(length, 0);
  // The first token is only an input here; where it is a target, it is in the previous window.
  sequence.lossMask[0] = 0;
  return sequence;
}

}  // namespace

std::vector<Sequence> packSequences(const std::vector<TokenizedExample>& examples, int seqLen,
                                    int32_t padId, bool pack) {
  if (seqLen < 1) {
    throw Error("sequence length " + std::to_string(seqLen) + " is not positive", "packing");
  }
  for (size_t i = 0; i < examples.size(); ++i) {
    if (examples[i].ids.size() != examples[i].lossMask.size()) {
      throw Error("example " + std::to_string(i) + " has " +
                      std::to_string(examples[i].ids.size()) + " ids but " +
                      std::to_string(examples[i].lossMask.size()) + " mask entries",
                  "packing");
    }
  }
  const size_t length = static_cast<size_t>(seqLen) + 1;
  std::vector<Sequence> sequences;
  if (!pack) {
    for (const TokenizedExample& example : examples) {
      if (example.ids.empty()) continue;
      Sequence sequence = window(example.ids, example.lossMask, 0,
                                 std::min(example.ids.size(), length), length, padId);
      if (hasTarget(sequence.lossMask)) sequences.push_back(std::move(sequence));
    }
    return sequences;
  }

  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  for (const TokenizedExample& example : examples) {
    if (example.ids.empty()) continue;
    const size_t start = ids.size();
    ids.insert(ids.end(), example.ids.begin(), example.ids.end());
    mask.insert(mask.end(), example.lossMask.begin(), example.lossMask.end());
    mask[start] = 0;  // never trained to predict an example from the one before it
  }
  for (size_t begin = 0; begin + 1 < ids.size(); begin += static_cast<size_t>(seqLen)) {
    Sequence sequence =
        window(ids, mask, begin, std::min(ids.size(), begin + length), length, padId);
    if (hasTarget(sequence.lossMask)) sequences.push_back(std::move(sequence));
  }
  return sequences;
}

}  // namespace fp4lab::data
