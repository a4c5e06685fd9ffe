// BF16 autocast scope for forward passes (training, evaluation, calibration, teachers).
#pragma once

#include <ATen/autocast_mode.h>

namespace fp4lab::train {

// BF16 autocast for the forward pass (fp32 weights stay the master copy). No-op when disabled.
class AutocastGuard {
 public:
  AutocastGuard(bool enabled, c10::DeviceType device) : m_enabled(enabled), m_device(device) {
    if (!m_enabled) return;
    m_previous = at::autocast::is_autocast_enabled(m_device);
    at::autocast::set_autocast_enabled(m_device, true);
    at::autocast::set_autocast_dtype(m_device, at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (!m_enabled) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(m_device, m_previous);
  }

 private:
  bool m_enabled;
  c10::DeviceType m_device;
  bool m_previous = false;
};

}  // namespace fp4lab::train
