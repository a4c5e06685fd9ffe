// Deterministic shuffling: the project's own PRNG and Fisher-Yates, so a seed gives the same order
// on every platform, compiler and standard library (std::shuffle and the std distributions do not).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace fp4lab::data {

// SplitMix64 (Steele, Lea, Flood 2014; the generator Java's SplittableRandom and the xoshiro
// authors use for seeding): one 64-bit state, every seed is a good seed.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : m_state(seed) {}

  uint64_t next() {
    uint64_t z = (m_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, bound), bound > 0. Rejects the 2^64 mod bound lowest outputs so that the
  // modulo is unbiased; the number of draws is therefore data-independent only in expectation,
  // but it is the same everywhere for a given seed.
  uint64_t below(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;
    for (;;) {
      const uint64_t r = next();
      if (r >= threshold) return r % bound;
    }
  }

 private:
  uint64_t m_state;
};

// Fisher-Yates from the back: for i = n-1 down to 1, swap item i with item below(i + 1).
template <typename T>
void shuffleDeterministic(std::vector<T>& items, uint64_t seed) {
  SplitMix64 rng(seed);
  for (size_t i = items.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.below(i));
    using std::swap;
    swap(items[i - 1], items[j]);
  }
}

}  // namespace fp4lab::data
