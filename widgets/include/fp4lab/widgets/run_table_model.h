// The runs table: one row per run folder of every root, from the worker's snapshots. Fixed
// columns (name, state, recipe, format, ..., duration); the name column carries the run's colour
// and its "show in charts" checkbox. Qt::UserRole gives numeric sort keys. Rows are inserted and
// removed as runs appear and go, and the rest get one dataChanged per poll, so selections and
// scroll positions survive refreshes.
#pragma once

#include <QAbstractTableModel>
#include <QSortFilterProxyModel>

#include <set>
#include <string>

#include "fp4lab/widgets/run_snapshot.h"

namespace fp4lab::widgets {

class RunTableModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column {
    Name,
    State,
    Recipe,
    Format,
    From,
    Progress,
    LastValLoss,
    BestValLoss,
    Kl,
    PassRates,
    GapRecovered,
    Started,
    Duration,
    ColumnCount
  };
  static constexpr int SortRole = Qt::UserRole;       // numbers for numeric columns
  static constexpr int IdRole = Qt::UserRole + 1;     // the run folder
  static constexpr int StateRole = Qt::UserRole + 2;  // RunState as int

  explicit RunTableModel(QObject* parent = nullptr);

  void setSnapshots(RunSnapshotsPtr snapshots);
  const RunSnapshots& snapshots() const;
  RunSnapshotsPtr snapshotsPtr() const { return m_runs; }
  const RunSnapshot* run(int row) const;
  int rowOf(const std::string& id) const;  // -1 if absent

  // "Show in charts": new runs are shown; the choice is kept per run id.
  bool isChecked(const std::string& id) const { return !m_unchecked.count(id); }
  void setChecked(const std::string& id, bool checked);
  std::set<std::string> checkedIds() const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role) override;

 Q_SIGNALS:
  void checkedChanged();

 private:
  RunSnapshotsPtr m_runs;
  std::set<std::string> m_unchecked;
};

// Text filter (name, recipe, format, state, folder), recipe and format facets, over the model.
class RunFilterProxy : public QSortFilterProxyModel {
  Q_OBJECT

 public:
  explicit RunFilterProxy(QObject* parent = nullptr);
  void setText(const QString& text);
  void setRecipe(const QString& recipe);  // "" : all
  void setFormat(const QString& format);  // "" : all; matched as a prefix ("NVFP4", "MXFP4")
  QString text() const { return m_text; }
  // Whether the filter as set now lets the model's row through (also while the view still shows
  // it: during the filter change).
  bool accepts(int sourceRow) const { return filterAcceptsRow(sourceRow, {}); }

 protected:
  bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;
  bool lessThan(const QModelIndex& left, const QModelIndex& right) const override;

 private:
  QString m_text, m_recipe, m_format;
};

// "1 h 02 min", "3 min 20 s", "12 s".
QString formatDuration(double seconds);
// `digits` significant digits, trailing zeros kept, so a column of them lines up and reads alike:
// 0.1300 beside 0.1569, 20.40 beside 20.34, 0.0004883 beside 0.0008000. "" for NaN.
QString significant(double value, int digits = 4);

}  // namespace fp4lab::widgets
