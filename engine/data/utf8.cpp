// UTF-8 validation and lossy decoding (the Unicode "maximal subpart" replacement rule).
#include "fp4lab/data/utf8.h"

#include <cstdint>

namespace fp4lab::data {
namespace {

// Length of the well-formed sequence starting at `i`, or 0 with `badLength` set to the length of
// the maximal subpart to replace (at least 1). The per-lead-byte ranges of the second byte are
// Table 3-7 of the Unicode standard; they exclude overlongs, surrogates and > U+10FFFF.
size_t sequenceLength(std::string_view s, size_t i, size_t& badLength) {
  const auto lead = static_cast<uint8_t>(s[i]);
  if (lead < 0x80) return 1;
  int continuation = 0;
  uint8_t low = 0x80, high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    continuation = 1;
  } else if (lead == 0xE0) {
    continuation = 2, low = 0xA0;
  } else if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) {
    continuation = 2;
  } else if (lead == 0xED) {
    continuation = 2, high = 0x9F;
  } else if (lead == 0xF0) {
    continuation = 3, low = 0x90;
  } else if (lead >= 0xF1 && lead <= 0xF3) {
    continuation = 3;
  } else if (lead == 0xF4) {
    continuation = 3, high = 0x8F;
  } else {
    badLength = 1;
    return 0;
  }
  size_t length = 1;
  for (int n = 0; n < continuation; ++n, ++length) {
    if (i + length >= s.size()) {
      badLength = length;
      return 0;
    }
    const auto byte = static_cast<uint8_t>(s[i + length]);
    if (byte < low || byte > high) {
      badLength = length;
      return 0;
    }
    low = 0x80, high = 0xBF;
  }
  return length;
}

}  // namespace

std::optional<size_t> findInvalidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t badLength = 0;
    const size_t length = sequenceLength(text, i, badLength);
    if (length == 0) return i;
    i += length;
  }
  return std::nullopt;
}

std::string utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    size_t badLength = 0;
    const size_t length = sequenceLength(bytes, i, badLength);
    if (length > 0) {
      out.append(bytes.data() + i, length);
      i += length;
    } else {
      out += "\xEF\xBF\xBD";
      i += badLength;
    }
  }
  return out;
}

}  // namespace fp4lab::data
