// Qt 6.4's raster paint engine (QImage::fill, every fill and line it rasterizes; measured on
// Debian's 6.4.2) returns with the upper halves of the YMM registers dirty. Until a VZEROUPPER,
// every legacy-SSE instruction that follows on that thread pays a transition penalty: libm's
// log10, atan2 and hypot, Qt's own SSE2 code (the path stroker, geometry) and this project's code
// ran about 20 times slower in the workbench than in a plain program (tests/bench/bench_gui,
// docs/performance.md). A thread started from a dirty thread inherits the state.
//
// clearUpperVectorState() issues VZEROUPPER where the CPU has AVX (a no-op elsewhere);
// guardVectorState() installs an application-wide event filter that does so before every event
// the GUI thread dispatches, so each handler (a paint, a timer, a chart frame) starts clean.
#pragma once

namespace fp4lab::widgets {

void clearUpperVectorState();
void guardVectorState();  // needs a QCoreApplication; installs once

}  // namespace fp4lab::widgets
