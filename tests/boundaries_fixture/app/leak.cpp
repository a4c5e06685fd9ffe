// Deliberate violations: proves the app boundary checks can fail (tests/CMakeLists.txt).
#include <torch/torch.h>
#include "model/causal_lm.h"
