// Small facts about the process and strings that several commands need.
#pragma once

#include <string>

namespace fp4lab {

// The cores this process may run on (taskset, cgroup cpusets), not every core of the machine:
// more threads than cores spin against each other. At least 1.
int usableCores();

inline bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace fp4lab
