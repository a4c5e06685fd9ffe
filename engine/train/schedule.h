// The learning-rate schedule: linear warmup, then cosine decay to a floor (min_lr_ratio x lr).
#pragma once

#include <cstdint>

namespace fp4lab::train {

struct CosineSchedule {
  double peakLr;
  double minLrRatio;
  int64_t warmupSteps;
  int64_t totalSteps;
  // Learning rate for optimizer step `step` (0-based).
  double at(int64_t step) const;
  static CosineSchedule make(double peakLr, double minLrRatio, double warmupRatio,
                             int64_t totalSteps);
};

}  // namespace fp4lab::train
