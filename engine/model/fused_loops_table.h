// The entry points of one instruction-set build of the fused loops: fused_loops.inl defines one
// table per build (FUSED_ISA::kTable), and fused_loops.cpp picks the best one this CPU runs.
#pragma once

#include "model/fused_loops.h"

namespace fp4lab::model::fused {

struct LoopTable {
  const char* name;
  void (*rmsNormForward)(const RmsNormArgs&, void*, float*);
  void (*rmsNormBackward)(const RmsNormArgs&, const float*, const void*, void*, float*);
  void (*swigluForward)(Type, const void*, const void*, void*, int64_t);
  void (*swigluBackward)(Type, const void*, const void*, const void*, void*, void*, int64_t);
  void (*ropeForward)(const RopeArgs&, const void*, void*);
  void (*ropeBackward)(const RopeArgs&, const void*, void*);
  void (*attentionProbs)(const float*, const float*, float, int64_t, int64_t, int64_t, float*,
                         uint16_t*);
  void (*attentionScoreGrad)(const float*, const float*, const float*, int64_t, int64_t, int64_t,
                             uint16_t*);
  void (*klForward)(const KlArgs&, float*, float*);
  void (*klBackward)(const KlArgs&, const float*, const float*, void*);
  void (*convert)(Type, const void*, Type, void*, int64_t);
  void (*clipGradient)(Type, const void*, const void*, float, void*, int64_t);
};

}  // namespace fp4lab::model::fused
