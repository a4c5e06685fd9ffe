// The size/accuracy frontier of `fp4lab sensitivity --output FILE.json`: each measured plan (keep
// the k most FP4-sensitive layers in BF16) as its model size against its validation loss, the BF16
// model's loss as a dashed line, and the chosen plan highlighted. The quantization inspector's
// model view shows it under the layers x formats heatmap once a sensitivity file is open.
#pragma once

#include <QString>
#include <QStringList>
#include <QWidget>

#include <cstdint>
#include <vector>

class QChartView;
class QLabel;

namespace fp4lab::widgets {

struct SensitivityPlanPoint {
  int64_t keep = 0;         // layers kept in BF16
  int64_t bytes = 0;        // the model's size with this plan
  double loss = 0, kl = 0;  // kl NaN when not measured
  QStringList kept;         // the layers kept, most sensitive first
};

struct SensitivityFile {
  QString model, format;  // as the command wrote them ("NVFP4 W4A16, 1-D blocks, ...")
  QString formatName;     // as given to it ("nvfp4")
  double bf16Loss = 0, ptqLoss = 0;
  int64_t bf16Bytes = 0, ptqBytes = 0;
  int64_t chosenKeep = -1;                  // -1: none chosen
  std::vector<SensitivityPlanPoint> plans;  // by keep, ascending
};

// Reads what `fp4lab sensitivity --output FILE` writes, HDF5 or JSON, through the one reader
// (analyze::readSensitivityFile). False, with `error` saying what is wrong and where (the path
// included), for a missing, unreadable or foreign file (the JSON of another command, an analysis
// file, a plan without keep or bytes); the file is small, so this reads on the calling thread.
bool readSensitivityFile(const QString& path, SensitivityFile* out, QString* error);

class FrontierChart : public QWidget {
  Q_OBJECT

 public:
  explicit FrontierChart(QWidget* parent = nullptr);

  void setFile(const SensitivityFile& file);
  void clear();
  bool hasData() const { return !m_file.plans.empty(); }
  const SensitivityFile& file() const { return m_file; }
  QChartView* view() const { return m_view; }
  // The point drawn for the chosen plan, in chart units (MiB, loss); (NaN, NaN) without one.
  QPointF chosenPoint() const;

 private:
  SensitivityFile m_file;
  QChartView* m_view = nullptr;
  QLabel* m_empty = nullptr;
};

}  // namespace fp4lab::widgets
