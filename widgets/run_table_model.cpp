// The runs table model and its filter.
#include "fp4lab/widgets/run_table_model.h"

#include <QColor>
#include <QDateTime>
#include <QFont>
#include <QIcon>
#include <QPixmap>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "fp4lab/widgets/run_charts.h"
#include "fp4lab/widgets/run_relations.h"

namespace fp4lab::widgets {

namespace {

const RunSnapshots& empty() {
  static const RunSnapshots none;
  return none;
}

QString number(double v, int digits = 4) {
  return significant(v, digits);
}

QString shortPath(const std::string& path) {
  // "…/sft/model" for a run's model, the name for a built-in.
  const QString p = QString::fromStdString(path);
  if (p.startsWith(QLatin1String("builtin:"))) return p;
  const QStringList parts = p.split(QLatin1Char('/'), Qt::SkipEmptyParts);
  if (parts.size() <= 2) return p;
  return QStringLiteral("\u2026/") + parts.mid(parts.size() - 2).join(QLatin1Char('/'));
}

QColor stateColour(RunState s) {
  switch (s) {
    case RunState::Running:
      return QColor(0x00, 0x72, 0xb2);
    case RunState::Finished:
      return QColor(0x00, 0x7a, 0x4d);
    case RunState::Failed:
    case RunState::Crashed:
      return QColor(0xc0, 0x30, 0x00);
    case RunState::Cancelled:
      return QColor(0x80, 0x60, 0x00);
    default:
      return QColor(0x55, 0x55, 0x55);
  }
}

QIcon colourIcon(const QColor& colour) {
  QPixmap pixmap(12, 12);
  pixmap.fill(colour);
  return QIcon(pixmap);
}

double startedEpoch(const RunSnapshot& r) {
  const QDateTime t =
      QDateTime::fromString(QString::fromStdString(r.summary.createdUtc), Qt::ISODate);
  return t.isValid() ? double(t.toSecsSinceEpoch()) : NAN;
}

}  // namespace

QString significant(double v, int digits) {
  if (!std::isfinite(v)) return {};
  char text[64];
  std::snprintf(text, sizeof text, "%#.*g", digits, v);
  QString out = QString::fromLatin1(text);
  if (out.endsWith(QLatin1Char('.'))) out.chop(1);  // "1234." from %#g
  return out;
}

QString formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return {};
  const qint64 s = qint64(std::llround(seconds));
  if (s >= 3600)
    return QStringLiteral("%1 h %2 min")
        .arg(s / 3600)
        .arg((s % 3600) / 60, 2, 10, QLatin1Char('0'));
  if (s >= 60) return QStringLiteral("%1 min %2 s").arg(s / 60).arg(s % 60);
  return QStringLiteral("%1 s").arg(s);
}

RunTableModel::RunTableModel(QObject* parent) : QAbstractTableModel(parent) {}

const RunSnapshots& RunTableModel::snapshots() const {
  return m_runs ? *m_runs : empty();
}

const RunSnapshot* RunTableModel::run(int row) const {
  const RunSnapshots& runs = snapshots();
  return row >= 0 && row < int(runs.size()) ? &runs[size_t(row)] : nullptr;
}

int RunTableModel::rowOf(const std::string& id) const {
  const RunSnapshots& runs = snapshots();
  const auto it =
      std::lower_bound(runs.begin(), runs.end(), id,
                       [](const RunSnapshot& r, const std::string& k) { return r.id < k; });
  return it != runs.end() && it->id == id ? int(it - runs.begin()) : -1;
}

void RunTableModel::setSnapshots(RunSnapshotsPtr next) {
  if (!next) next = std::make_shared<RunSnapshots>();
  // Both lists are sorted by id: remove the rows that went, then insert the ones that came, one
  // contiguous range at a time, so views keep their selection; the rest is one dataChanged.
  const RunSnapshots& before = snapshots();
  std::set<std::string> nextIds;
  for (const auto& r : *next) nextIds.insert(r.id);
  auto current = std::make_shared<RunSnapshots>(before);
  for (int row = int(current->size()) - 1; row >= 0; --row) {
    if (nextIds.count((*current)[size_t(row)].id)) continue;
    int first = row;
    while (first > 0 && !nextIds.count((*current)[size_t(first - 1)].id)) --first;
    beginRemoveRows({}, first, row);
    current->erase(current->begin() + first, current->begin() + row + 1);
    m_runs = current;
    endRemoveRows();
    current = std::make_shared<RunSnapshots>(*m_runs);
    row = first;
  }
  size_t i = 0;  // position in current
  for (size_t j = 0; j < next->size();) {
    if (i < current->size() && (*current)[i].id == (*next)[j].id) {
      (*current)[i] = (*next)[j];
      ++i, ++j;
      continue;
    }
    size_t k = j;  // (*next)[j..k) are new and go before current[i]
    while (k < next->size() && (i >= current->size() || (*next)[k].id < (*current)[i].id)) ++k;
    beginInsertRows({}, int(i), int(i + (k - j)) - 1);
    current->insert(current->begin() + std::ptrdiff_t(i), next->begin() + std::ptrdiff_t(j),
                    next->begin() + std::ptrdiff_t(k));
    m_runs = current;
    endInsertRows();
    current = std::make_shared<RunSnapshots>(*m_runs);
    i += k - j;
    j = k;
  }
  m_runs = next;
  if (!next->empty())
    Q_EMIT dataChanged(index(0, 0), index(int(next->size()) - 1, ColumnCount - 1));
}

void RunTableModel::setChecked(const std::string& id, bool checked) {
  if (checked == isChecked(id)) return;
  if (checked)
    m_unchecked.erase(id);
  else
    m_unchecked.insert(id);
  const int row = rowOf(id);
  if (row >= 0) Q_EMIT dataChanged(index(row, Name), index(row, Name), {Qt::CheckStateRole});
  Q_EMIT checkedChanged();
}

std::set<std::string> RunTableModel::checkedIds() const {
  std::set<std::string> ids;
  for (const auto& r : snapshots())
    if (isChecked(r.id)) ids.insert(r.id);
  return ids;
}

int RunTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(snapshots().size());
}

int RunTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant RunTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || section < 0 || section >= ColumnCount) return {};
  static const char* names[] = {"Name",         "State",      "Recipe",        "Format",
                                "Started from", "Step",       "Val loss",      "Best val loss",
                                "KL to ref.",   "Pass rates", "Gap recovered", "Started",
                                "Duration"};
  static const char* tips[] = {
      "the run folder; the checkbox shows the run in the charts, the square is its colour",
      "queued, running, finished, failed, cancelled, or crashed (running with a dead process)",
      "sft, ptq, qat or qad",
      "the quantization: format, W4A4 or W4A16, MXFP4 scale rule",
      "model.path: the model the run started from",
      "optimizer steps done / planned",
      "the last validation loss (cross-entropy per token)",
      "the lowest validation loss logged",
      "the last KL divergence to the reference model",
      "the last pass rate of each graded task",
      "(PTQ - run) / (PTQ - BF16) on validation loss, against its PTQ run and BF16 reference",
      "when the run's log was created (UTC)",
      "wall time of the run so far"};
  if (role == Qt::DisplayRole) return QString::fromLatin1(names[section]);
  if (role == Qt::ToolTipRole) return QString::fromLatin1(tips[section]);
  return {};
}

Qt::ItemFlags RunTableModel::flags(const QModelIndex& index) const {
  if (!index.isValid()) return Qt::NoItemFlags;
  Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable;
  if (index.column() == Name) f |= Qt::ItemIsUserCheckable;
  return f;
}

bool RunTableModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  const RunSnapshot* r = index.isValid() ? run(index.row()) : nullptr;
  if (!r || index.column() != Name || role != Qt::CheckStateRole) return false;
  setChecked(r->id, value.toInt() == Qt::Checked);
  return true;
}

QVariant RunTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.model() != this) return {};
  const RunSnapshot* rp = run(index.row());
  if (!rp) return {};
  const RunSnapshot& r = *rp;
  const RunSummary& s = r.summary;
  const int column = index.column();
  if (role == IdRole) return QString::fromStdString(r.id);
  if (role == StateRole) return int(r.state());
  if (role == Qt::CheckStateRole && column == Name)
    return isChecked(r.id) ? Qt::Checked : Qt::Unchecked;
  if (role == Qt::DecorationRole && column == Name) return colourIcon(runColour(r.name));
  if (role == Qt::ForegroundRole && column == State) return stateColour(r.state());
  if (role == Qt::ToolTipRole) {
    if (column == State) {
      QString tip = QString::fromStdString(stateLabel(r));
      if (r.starting && r.state() == RunState::Queued)
        tip += QStringLiteral(": its process started and is loading");
      else if (!r.folder.message.empty())
        tip += QStringLiteral(": ") + QString::fromStdString(r.folder.message);
      if (r.damaged()) tip += QLatin1Char('\n') + QString::fromStdString(damageText(r));
      return tip;
    }
    if (column == From) return QString::fromStdString(r.folder.config.modelPath);
    if (column == GapRecovered)
      return QString::fromStdString(gapRecoveredText(snapshots(), size_t(index.row())).detail);
    if (column == Name) return QString::fromStdString(r.id);
    return {};
  }
  const bool hasConfig = r.folder.hasConfig;
  const double gap = column == GapRecovered ? gapRecovered(snapshots(), size_t(index.row())) : NAN;
  const double duration = s.wallSeconds;
  if (role == SortRole) {
    switch (column) {
      case Progress:
        return double(s.step);
      case LastValLoss:
        return std::isfinite(s.lastValLoss) ? s.lastValLoss : 1e300;
      case BestValLoss:
        return std::isfinite(s.bestValLoss) ? s.bestValLoss : 1e300;
      case Kl:
        return std::isfinite(s.lastKl) ? s.lastKl : 1e300;
      case GapRecovered:
        return std::isfinite(gap) ? gap : -1e300;
      case Started:
        return std::isfinite(startedEpoch(r)) ? startedEpoch(r) : 0.0;
      case Duration:
        return std::isfinite(duration) ? duration : 0.0;
      case PassRates: {
        double sum = 0;
        for (const auto& [task, rate] : s.passRates) sum += rate;
        return s.passRates.empty() ? -1.0 : sum / double(s.passRates.size());
      }
      default:
        break;
    }
    return data(index, Qt::DisplayRole);
  }
  if (role == Qt::FontRole && column == Name && r.state() == RunState::Running) {
    QFont f;
    f.setBold(true);
    return f;
  }
  if (role != Qt::DisplayRole) return {};
  switch (column) {
    case Name:
      return QString::fromStdString(r.name);
    case State:
      return QString::fromStdString(stateLabel(r));
    case Recipe:
      return hasConfig ? QString::fromStdString(r.folder.config.recipe) : QString();
    case Format:
      return hasConfig ? QString::fromStdString(formatLabel(r.folder.config)) : QString();
    case From:
      return hasConfig ? shortPath(r.folder.config.modelPath) : QString();
    case Progress:
      return s.maxSteps > 0 ? QStringLiteral("%1/%2").arg(s.step).arg(s.maxSteps)
                            : QString::number(s.step);
    case LastValLoss:
      return number(s.lastValLoss);
    case BestValLoss:
      return number(s.bestValLoss);
    case Kl:
      return number(s.lastKl, 3);
    case PassRates: {
      QStringList parts;
      for (const auto& [task, rate] : s.passRates)
        parts << QStringLiteral("%1 %2%")
                     .arg(QString::fromStdString(task))
                     .arg(rate * 100, 0, 'f', 0);
      return parts.join(QStringLiteral(", "));
    }
    case GapRecovered:
      return QString::fromStdString(gapRecoveredText(snapshots(), size_t(index.row())).text);
    case Started: {
      const QDateTime t = QDateTime::fromString(QString::fromStdString(s.createdUtc), Qt::ISODate);
      return t.isValid() ? t.toLocalTime().toString(QStringLiteral("yyyy-MM-dd HH:mm")) : QString();
    }
    case Duration:
      return formatDuration(duration);
    default:
      return {};
  }
}

RunFilterProxy::RunFilterProxy(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(RunTableModel::SortRole);
  setDynamicSortFilter(true);
}

void RunFilterProxy::setText(const QString& text) {
  m_text = text.trimmed();
  invalidateFilter();
}

void RunFilterProxy::setRecipe(const QString& recipe) {
  m_recipe = recipe;
  invalidateFilter();
}

void RunFilterProxy::setFormat(const QString& format) {
  m_format = format;
  invalidateFilter();
}

bool RunFilterProxy::filterAcceptsRow(int sourceRow, const QModelIndex&) const {
  auto* model = qobject_cast<RunTableModel*>(sourceModel());
  const RunSnapshot* r = model ? model->run(sourceRow) : nullptr;
  if (!r) return true;
  const QString recipe = QString::fromStdString(r->folder.config.recipe);
  const QString format =
      r->folder.hasConfig ? QString::fromStdString(formatLabel(r->folder.config)) : QString();
  if (!m_recipe.isEmpty() && recipe != m_recipe) return false;
  if (!m_format.isEmpty() && !format.startsWith(m_format)) return false;
  if (m_text.isEmpty()) return true;
  // Every word must match one of the run's texts (name, recipe, format, state, folder).
  const QString haystack = QString::fromStdString(r->name) + QLatin1Char(' ') + recipe +
                           QLatin1Char(' ') + format + QLatin1Char(' ') +
                           QString::fromLatin1(toString(r->state())) + QLatin1Char(' ') +
                           QString::fromStdString(r->id);
  for (const QString& word : m_text.split(QLatin1Char(' '), Qt::SkipEmptyParts))
    if (!haystack.contains(word, Qt::CaseInsensitive)) return false;
  return true;
}

bool RunFilterProxy::lessThan(const QModelIndex& left, const QModelIndex& right) const {
  const QVariant a = left.data(RunTableModel::SortRole), b = right.data(RunTableModel::SortRole);
  if (a.typeId() == QMetaType::Double && b.typeId() == QMetaType::Double)
    return a.toDouble() < b.toDouble();
  return QString::localeAwareCompare(a.toString(), b.toString()) < 0;
}

}  // namespace fp4lab::widgets
