// bench_heatmap: the quantization inspector's heatmap redraw for L layers x E evaluations
// (default 200 x 200; goal < 30 ms), offscreen. Times, each as the median and p95 of --reps:
//   index   setData: the colour index of every cell into the Indexed8 image (new values each rep)
//   paint   the one paint function into a 1200x800 ARGB image (image scaled, labels, colour bar)
//   widget  setData + a synchronous repaint() of a 1200x800 widget (what a new snapshot costs)
//   view    the run view end to end: a new snapshot of a run with L x E /quant values through
//           QuantInspector (matrix, heatmap, worst-layers list) and its repaint
// Qt and plain C++ only. Usage: bench_heatmap [--layers L] [--evals E] [--reps N] [--quick]
#include <QApplication>
#include <QElapsedTimer>
#include <QPainter>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fp4lab/widgets/heatmap_widget.h"
#include "fp4lab/widgets/quant_inspector.h"

using namespace fp4lab::widgets;

namespace {

struct Stats {
  double median, p95;
};

Stats timeIt(int reps, const std::function<void(int)>& body) {
  std::vector<double> ms;
  body(-1);  // warm-up
  for (int i = 0; i < reps; ++i) {
    QElapsedTimer t;
    t.start();
    body(i);
    ms.push_back(double(t.nsecsElapsed()) / 1e6);
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[std::min(ms.size() - 1, size_t(std::ceil(0.95 * ms.size())) - 1)]};
}

}  // namespace

int main(int argc, char** argv) {
  if (!std::getenv("QT_QPA_PLATFORM")) setenv("QT_QPA_PLATFORM", "offscreen", 1);
  int layers = 200, evals = 200, reps = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--layers")
      layers = next();
    else if (a == "--evals")
      evals = next();
    else if (a == "--reps")
      reps = next();
    else if (a == "--quick")
      reps = 5;
    else {
      std::fprintf(stderr, "usage: bench_heatmap [--layers L] [--evals E] [--reps N] [--quick]\n");
      return 2;
    }
  }
  QApplication app(argc, argv);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(20.0f, 3.0f);
  std::vector<std::vector<float>> data(4);
  for (auto& d : data) {
    d.resize(size_t(layers) * size_t(evals));
    for (float& v : d) v = normal(rng);
    d[7] = NAN;
  }
  QStringList rowLabels, colLabels;
  for (int l = 0; l < layers; ++l) rowLabels << QStringLiteral("%1.mlp.down_proj").arg(l / 7);
  for (int e = 0; e < evals; ++e) colLabels << QStringLiteral("step %1").arg(50 * (e + 1));

  HeatmapWidget w;
  const Stats index = timeIt(reps, [&](int i) {
    w.setData(layers, evals, data[size_t(i + 1) % 4], rowLabels, colLabels);
  });
  QImage target(1200, 800, QImage::Format_ARGB32_Premultiplied);
  const Stats paint = timeIt(reps, [&](int) {
    target.fill(Qt::white);
    QPainter p(&target);
    w.paint(p, target.size());
  });
  w.resize(1200, 800);
  w.show();
  app.processEvents();
  const Stats widget = timeIt(reps, [&](int i) {
    w.setData(layers, evals, data[size_t(i + 1) % 4], rowLabels, colLabels);
    w.repaint();
  });

  // The run view: snapshots of one run whose /quant grows by nothing but its values.
  QuantInspector inspector;
  inspector.resize(1400, 900);
  inspector.show();
  app.processEvents();
  std::vector<RunSnapshotsPtr> snapshots;
  for (int s = 0; s < 4; ++s) {
    auto curves = std::make_shared<RunCurves>();
    curves->name = "bench";
    curves->quantMetrics = {"sqnr_db"};
    for (int l = 0; l < layers; ++l)
      curves->quantLayers.push_back("model.layers." + std::to_string(l / 7) + ".mlp.down_proj" +
                                    std::to_string(l % 7));
    for (int e = 0; e < evals; ++e) curves->quantSteps.push_back(50 * (e + 1));
    curves->quant["sqnr_db"] = data[size_t(s)];
    auto runs = std::make_shared<RunSnapshots>(1);
    (*runs)[0].id = "/bench/run";
    (*runs)[0].name = "bench";
    (*runs)[0].curves = curves;
    snapshots.push_back(runs);
  }
  inspector.setRuns(snapshots[0]);
  inspector.setSelectedRun("/bench/run");
  const Stats view = timeIt(reps, [&](int i) {
    inspector.setRuns(snapshots[size_t(i + 1) % 4]);
    inspector.runHeatmap()->repaint();
  });
  if (!inspector.runHeatmap()->hasData()) {
    std::fprintf(stderr, "the run view drew nothing\n");
    return 1;
  }
  std::printf("heatmap %d layers x %d evaluations, %d reps (median / p95, ms)\n", layers, evals,
              reps);
  std::printf("| step | median ms | p95 ms |\n| --- | ---: | ---: |\n");
  std::printf("| index (setData) | %.2f | %.2f |\n", index.median, index.p95);
  std::printf("| paint 1200x800 | %.2f | %.2f |\n", paint.median, paint.p95);
  std::printf("| widget setData + repaint | %.2f | %.2f |\n", widget.median, widget.p95);
  std::printf("| run view: snapshot to repaint | %.2f | %.2f |\n", view.median, view.p95);
  return 0;
}
