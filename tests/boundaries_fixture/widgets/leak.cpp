// Deliberate violation: proves the boundary check can fail (tests/CMakeLists.txt, WILL_FAIL).
  #  include <torch/torch.h>
