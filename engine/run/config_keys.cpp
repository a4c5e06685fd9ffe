// What a configuration key accepts: its type, choices and bounds, checked the same way for the
// run config and the experiment, with messages that say what was given and what would do.
#include "fp4lab/run/config_keys.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace fp4lab::run {
namespace {

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

std::string lower(const std::string& s) {
  std::string out;
  for (char c : s) out += char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string joined(const std::vector<std::string>& items, const std::string& last) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i)
    s += (i == 0 ? "" : (i + 1 == items.size() ? " " + last + " " : ", ")) + items[i];
  return s;
}

}  // namespace

std::string ConfigKey::typeDescription() const {
  switch (type) {
    case KeyType::Integer:
      return "an integer";
    case KeyType::Number:
      return "a number";
    case KeyType::Boolean:
      return "true or false";
    case KeyType::Choice:
      return "one of " + joined(choices, "or");
    case KeyType::String:
      break;
  }
  return "a string";
}

std::string ConfigKey::check(const std::string& value) const {
  const std::string shown = "'" + value + "'";
  switch (type) {
    case KeyType::String:
      return "";
    case KeyType::Choice:
      if (std::find(choices.begin(), choices.end(), value) != choices.end()) return "";
      return "must be " + typeDescription() + ", not " + shown;
    case KeyType::Boolean: {
      const std::string v = lower(value);
      for (const char* ok : {"true", "false", "yes", "no", "on", "off", "1", "0"})
        if (v == ok) return "";
      return "must be true or false, not " + shown;
    }
    case KeyType::Integer:
    case KeyType::Number:
      break;
  }
  // Integers: an optional sign and digits (no "1e3", no "10.0"); numbers: anything strtod reads
  // whole, finite.
  double v = 0;
  bool ok = !value.empty();
  if (type == KeyType::Integer) {
    size_t i = (ok && (value[0] == '-' || value[0] == '+')) ? 1 : 0;
    ok = ok && i < value.size();
    for (; ok && i < value.size(); ++i) ok = std::isdigit(static_cast<unsigned char>(value[i]));
    if (ok) v = std::strtod(value.c_str(), nullptr);
  } else if (ok) {
    char* end = nullptr;
    errno = 0;
    v = std::strtod(value.c_str(), &end);
    ok = end && *end == '\0' && std::isfinite(v);
  }
  if (!ok) return "must be " + typeDescription() + ", not " + shown;
  const bool low = minExclusive ? !(v > min) : !(v >= min);
  const bool high = maxExclusive ? !(v < max) : !(v <= max);
  if (!low && !high) return "";
  return "must be " + rangeDescription() + ", not " + value;
}

std::string ConfigKey::rangeDescription() const {
  const bool bounded = std::isfinite(max) && max < 1e18;
  if (std::isfinite(min) && bounded)
    return (minExclusive ? "in (" : "in [") + number(min) + ", " + number(max) +
           (maxExclusive ? ")" : "]");
  if (std::isfinite(min))
    return min == 0 && minExclusive ? std::string("positive")
                                    : (minExclusive ? "above " : "at least ") + number(min);
  if (bounded) return (maxExclusive ? "below " : "at most ") + number(max);
  return "";
}

std::string closestName(const std::string& name, const std::vector<std::string>& names) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::string best;
  size_t bestDistance = 4;
  for (const auto& n : names) {
    const size_t d = distance(name, n);
    if (d < bestDistance) bestDistance = d, best = n;
  }
  return best;
}

}  // namespace fp4lab::run
