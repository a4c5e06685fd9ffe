// Glob matching of module names (quant.include / quant.exclude, --exclude, analyze).
#include "fp4lab/common/glob.h"

namespace fp4lab {

bool globMatch(const std::string& pattern, const std::string& name) {
  // Iterative matching with backtracking to the last '*'; [...] classes with '!' or '^'.
  size_t p = 0, n = 0, star = std::string::npos, mark = 0;
  auto classMatch = [&](size_t at, char c, size_t* next) {
    size_t k = at + 1;
    bool negate = k < pattern.size() && (pattern[k] == '!' || pattern[k] == '^');
    if (negate) ++k;
    bool matched = false, first = true;
    for (; k < pattern.size() && (first || pattern[k] != ']'); ++k, first = false) {
      if (k + 2 < pattern.size() && pattern[k + 1] == '-' && pattern[k + 2] != ']') {
        if (c >= pattern[k] && c <= pattern[k + 2]) matched = true;
        k += 2;
      } else if (pattern[k] == c) {
        matched = true;
      }
    }
    if (k >= pattern.size()) return -1;  // no closing ']': a literal '['
    *next = k + 1;
    return matched != negate ? 1 : 0;
  };
  while (n < name.size()) {
    size_t next = 0;
    int cls = p < pattern.size() && pattern[p] == '[' ? classMatch(p, name[n], &next) : -1;
    if (cls == 1) {
      p = next, ++n;
    } else if (cls == -1 && p < pattern.size() && pattern[p] != '*' &&
               (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p, ++n;
    } else if (cls == -1 && p < pattern.size() && pattern[p] == '*') {
      star = p++, mark = n;
    } else if (star != std::string::npos) {
      p = star + 1, n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace fp4lab
