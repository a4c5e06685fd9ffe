// The cores this process may run on.
#include "fp4lab/common/system.h"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace fp4lab {

int usableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace fp4lab
