// Packing: window lengths, the one-token overlap, padding, and masks aligned with targets.
#include <catch2/catch.hpp>

#include <numeric>
#include <random>

#include "fp4lab/data/packing.h"
#include "fp4lab/error.h"

using namespace fp4lab::data;
using Ids = std::vector<int32_t>;
using Mask = std::vector<uint8_t>;

namespace {
constexpr int32_t kPad = -1;  // distinguishable from every real id in these tests

TokenizedExample example(Ids ids, Mask mask) {
  return {std::move(ids), std::move(mask)};
}
}  // namespace

TEST_CASE("packing: windows overlap by one token and pad the tail", "[packing]") {
  const std::vector<TokenizedExample> examples = {example({1, 2, 3}, {0, 1, 1}),
                                                  example({4, 5}, {1, 1})};
  const auto sequences = packSequences(examples, 3, kPad, true);
  REQUIRE(sequences.size() == 2);
  // Stream 1 2 3 4 5; 4 starts an example, so its mask is forced to 0 (mask given as 1).
  CHECK(sequences[0].ids == Ids{1, 2, 3, 4});
  CHECK(sequences[0].lossMask == Mask{0, 1, 1, 0});
  CHECK(sequences[1].ids == Ids{4, 5, kPad, kPad});
  CHECK(sequences[1].lossMask == Mask{0, 1, 0, 0});
}

TEST_CASE("packing: a window with no target is dropped", "[packing]") {
  // Stream of 7 = 2 * 3 + 1: the window starting at 6 would hold only an input.
  const auto sequences =
      packSequences({example({1, 2, 3, 4, 5, 6, 7}, {0, 1, 1, 1, 1, 1, 1})}, 3, kPad, true);
  REQUIRE(sequences.size() == 2);
  CHECK(sequences[1].ids == Ids{4, 5, 6, 7});
  // Only prompt tokens: nothing to train on.
  CHECK(packSequences({example({1, 2, 3}, {0, 0, 0})}, 8, kPad, true).empty());
  CHECK(packSequences({}, 8, kPad, true).empty());
}

TEST_CASE("packing: one example per sequence, truncated or padded", "[packing]") {
  const std::vector<TokenizedExample> examples = {
      example({1, 2, 3, 4, 5, 6}, {0, 0, 1, 1, 1, 1}),  // truncated to 4
      example({7, 8}, {0, 1}),                          // padded
      example({9}, {0}),                                // no target: dropped
      example({10, 11, 12, 13, 14}, {0, 0, 0, 0, 1})};  // its only target is cut off: dropped
  const auto sequences = packSequences(examples, 3, kPad, false);
  REQUIRE(sequences.size() == 2);
  CHECK(sequences[0].ids == Ids{1, 2, 3, 4});
  CHECK(sequences[0].lossMask == Mask{0, 0, 1, 1});
  CHECK(sequences[1].ids == Ids{7, 8, kPad, kPad});
  CHECK(sequences[1].lossMask == Mask{0, 1, 0, 0});
}

TEST_CASE("packing: every target appears exactly once, aligned with its id", "[packing]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<TokenizedExample> examples;
    Ids stream;
    Mask streamMask;
    int32_t next = 0;
    const int count = 1 + static_cast<int>(rng() % 12);
    for (int e = 0; e < count; ++e) {
      TokenizedExample ex;
      const int length = 1 + static_cast<int>(rng() % 20);
      for (int t = 0; t < length; ++t) {
        ex.ids.push_back(next++);  // ids are stream positions: alignment is checkable
        ex.lossMask.push_back(t > 0 && rng() % 3 != 0);
      }
      stream.insert(stream.end(), ex.ids.begin(), ex.ids.end());
      streamMask.insert(streamMask.end(), ex.lossMask.begin(), ex.lossMask.end());
      examples.push_back(std::move(ex));
    }
    const int seqLen = 1 + static_cast<int>(rng() % 16);
    const auto sequences = packSequences(examples, seqLen, kPad, true);
    std::vector<int> timesTargeted(stream.size(), 0);
    for (const Sequence& s : sequences) {
      REQUIRE(s.ids.size() == static_cast<size_t>(seqLen) + 1);
      REQUIRE(s.lossMask.size() == s.ids.size());
      CHECK(s.lossMask[0] == 0);
      // Each window continues the stream from its first id, then pads.
      for (size_t i = 0; i < s.ids.size(); ++i) {
        if (s.ids[i] == kPad) {
          CHECK(s.lossMask[i] == 0);
          continue;
        }
        REQUIRE(s.ids[i] == s.ids[0] + static_cast<int32_t>(i));
        if (s.lossMask[i]) ++timesTargeted[s.ids[i]];
      }
      // Consecutive windows share one token.
      CHECK(s.ids[0] % seqLen == 0);
    }
    for (size_t p = 0; p < stream.size(); ++p) {
      INFO("trial " << trial << " position " << p);
      CHECK(timesTargeted[p] == (streamMask[p] ? 1 : 0));
    }
  }
}

TEST_CASE("packing: invalid arguments", "[packing]") {
  CHECK_THROWS_AS(packSequences({example({1, 2}, {0, 1})}, 0, kPad, true), fp4lab::Error);
  CHECK_THROWS_AS(packSequences({example({1, 2}, {0})}, 4, kPad, false), fp4lab::Error);
}
