// Cosine schedule with warmup, as Hugging Face's get_cosine_with_min_lr_schedule_with_warmup.
#include "train/schedule.h"

#include <algorithm>
#include <cmath>

namespace fp4lab::train {

CosineSchedule CosineSchedule::make(double peakLr, double minLrRatio, double warmupRatio,
                                    int64_t totalSteps) {
  int64_t warmup = int64_t(std::ceil(warmupRatio * double(totalSteps)));
  return CosineSchedule{peakLr, minLrRatio, std::min(warmup, totalSteps), totalSteps};
}

double CosineSchedule::at(int64_t step) const {
  if (step < warmupSteps) return peakLr * double(step + 1) / double(warmupSteps);
  double span = double(std::max<int64_t>(1, totalSteps - warmupSteps));
  double progress = std::min(1.0, double(step - warmupSteps) / span);
  double minLr = peakLr * minLrRatio;
  return minLr + (peakLr - minLr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace fp4lab::train
