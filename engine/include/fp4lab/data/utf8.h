// UTF-8 helpers shared by the tokenizers: validation and lossy decoding of byte strings that
// token boundaries may have cut in the middle of a character.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace fp4lab::data {

// Byte offset of the first ill-formed sequence in `text` (overlongs, surrogates and code points
// above U+10FFFF count as ill-formed), or nullopt when `text` is valid UTF-8.
std::optional<size_t> findInvalidUtf8(std::string_view text);

// `bytes` with every maximal ill-formed subsequence replaced by U+FFFD, as the Unicode standard
// recommends (and as Rust's String::from_utf8_lossy, hence Hugging Face's decoders, do): a
// character cut after two of its three bytes becomes one U+FFFD, a stray continuation byte one.
std::string utf8Lossy(std::string_view bytes);

}  // namespace fp4lab::data
