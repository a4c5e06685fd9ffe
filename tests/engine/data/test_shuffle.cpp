// SplitMix64 and the deterministic Fisher-Yates shuffle.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>

#include "fp4lab/data/shuffle.h"

using namespace fp4lab::data;

namespace {
std::vector<int> iota(int n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}
}  // namespace

TEST_CASE("splitmix64 matches the reference outputs", "[shuffle]") {
  // The first outputs of Vigna's splitmix64.c seeded with 0.
  SplitMix64 rng(0);
  CHECK(rng.next() == 0xE220A8397B1DCDAFull);
  CHECK(rng.next() == 0x6E789E6AA1B965F4ull);
  CHECK(rng.next() == 0x06C45D188009454Full);
}

TEST_CASE("splitmix64 below() stays in range and covers it", "[shuffle]") {
  SplitMix64 rng(99);
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 7000; ++i) {
    const uint64_t r = rng.below(7);
    REQUIRE(r < 7);
    ++counts[r];
  }
  for (int c : counts) CHECK((c > 850 && c < 1150));
  CHECK(rng.below(1) == 0);
}

TEST_CASE("shuffle: a fixed order for a tiny case", "[shuffle]") {
  // Seed 42: the first outputs mod 5, 4, 3, 2 are 3, 3, 0, 0, so Fisher-Yates swaps
  // (4,3), (3,3), (2,0), (1,0): 0 1 2 3 4 -> 0 1 2 4 3 -> same -> 2 1 0 4 3 -> 1 2 0 4 3.
  std::vector<int> v = iota(5);
  shuffleDeterministic(v, 42);
  CHECK(v == std::vector<int>{1, 2, 0, 4, 3});
  std::vector<int> eight = iota(8);
  shuffleDeterministic(eight, 0);
  CHECK(eight == std::vector<int>{2, 5, 0, 3, 4, 6, 1, 7});
}

TEST_CASE("shuffle: permutation, same seed same order, other seed other order", "[shuffle]") {
  for (int n : {0, 1, 2, 10, 1000}) {
    std::vector<int> a = iota(n), b = iota(n), c = iota(n);
    shuffleDeterministic(a, 123);
    shuffleDeterministic(b, 123);
    shuffleDeterministic(c, 124);
    CHECK(a == b);
    std::vector<int> sorted = a;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == iota(n));
    if (n >= 10) {
      CHECK(a != c);
      CHECK(a != iota(n));
    }
  }
  std::vector<std::string> words = {"a", "b", "c"};
  shuffleDeterministic(words, 5);
  std::sort(words.begin(), words.end());
  CHECK(words == std::vector<std::string>{"a", "b", "c"});
}
