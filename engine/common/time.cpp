// UTC timestamps from the system clock.
#include "fp4lab/common/time.h"

#include <chrono>
#include <cstdio>
#include <ctime>

namespace fp4lab {
namespace {

std::tm utcParts(std::time_t seconds) {
  std::tm parts{};
  gmtime_r(&seconds, &parts);
  return parts;
}

}  // namespace

std::string utcTimestamp(bool milliseconds) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const std::tm parts = utcParts(seconds);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &parts);
  std::string out = buf;
  if (milliseconds) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() %
        1000;
    std::snprintf(buf, sizeof buf, ".%03d", int(ms));
    out += buf;
  }
  return out + "Z";
}

std::string utcCompactTimestamp() {
  const std::tm parts = utcParts(std::time(nullptr));
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &parts);
  return buf;
}

}  // namespace fp4lab
