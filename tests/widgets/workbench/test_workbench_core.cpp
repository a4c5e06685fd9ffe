// The workbench's parts without a window: bucketing and smoothing against brute force, the runs
// table model under QAbstractItemModelTester, the filter, the log worker over real run folders
// (growing, corrupt and truncated logs, a garbage status.json or run.yaml, a root removed while
// watched), and the run queue's event parsing, console bound and failures to start.
#include <catch2/catch.hpp>

#include <QSignalSpy>

#include <algorithm>
#include <fstream>
#include <limits>
#include <random>
#include <thread>

#include "fp4lab/widgets/curve_buckets.h"
#include "fp4lab/widgets/log_poll_worker.h"
#include "fp4lab/widgets/run_charts.h"
#include "fp4lab/widgets/run_queue.h"
#include "fp4lab/widgets/run_table_model.h"
#include "workbench_fixtures.h"

using namespace fp4lab;
using namespace fp4lab::widgets;
using fp4lab::testing::TempDir;

namespace {

Points randomCurve(std::mt19937& rng, size_t n, bool repeats) {
  Points p;
  std::uniform_real_distribution<double> step(0.0, 2.0), y(-5.0, 5.0);
  double x = std::uniform_real_distribution<double>(-100, 100)(rng);
  for (size_t i = 0; i < n; ++i) {
    x += repeats && i % 3 == 0 ? 0.0 : step(rng);
    p.emplace_back(x, y(rng));
  }
  return p;
}

// Bucketing written out the slow way: every point in [x0, x1] goes to floor((x - x0) / w), each
// bucket keeps its last point and its min and max.
BucketedCurve bruteForce(const Points& p, double x0, double x1, int buckets) {
  BucketedCurve out;
  std::vector<size_t> inside;
  size_t before = p.size(), after = p.size();
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i].first < x0) before = i;
    if (p[i].first >= x0 && p[i].first <= x1) inside.push_back(i);
    if (p[i].first > x1 && after == p.size()) after = i;
  }
  if (inside.size() <= size_t(2 * buckets)) {
    if (before < p.size()) out.line.push_back(p[before]);
    for (size_t i : inside) out.line.push_back(p[i]);
    if (after < p.size()) out.line.push_back(p[after]);
    return out;
  }
  const double w = (x1 - x0) / buckets;
  std::vector<std::vector<size_t>> members(static_cast<size_t>(buckets));
  for (size_t i : inside)
    members[size_t(std::clamp(int(std::floor((p[i].first - x0) / w)), 0, buckets - 1))].push_back(
        i);
  if (before < p.size()) out.line.push_back(p[before]);
  for (const auto& m : members) {
    if (m.empty()) continue;
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i : m) lo = std::min(lo, p[i].second), hi = std::max(hi, p[i].second);
    out.line.push_back(p[m.back()]);
    out.low.emplace_back(p[m.back()].first, lo);
    out.high.emplace_back(p[m.back()].first, hi);
  }
  if (after < p.size()) out.line.push_back(p[after]);
  return out;
}

}  // namespace

TEST_CASE("bucketing matches the brute-force definition on random curves", "[buckets]") {
  std::mt19937 rng(std::random_device{}());
  for (size_t n :
       {size_t(0), size_t(1), size_t(2), size_t(7), size_t(500), size_t(5000), size_t(100000)}) {
    for (int trial = 0; trial < 4; ++trial) {
      const Points p = randomCurve(rng, n, trial % 2 == 1);
      const double lo = p.empty() ? 0 : p.front().first, hi = p.empty() ? 1 : p.back().first;
      std::uniform_real_distribution<double> pick(lo - 5, hi + 5);
      double x0 = pick(rng), x1 = pick(rng);
      if (x0 > x1) std::swap(x0, x1);
      if (trial == 0) x0 = lo, x1 = hi;
      const int buckets = std::uniform_int_distribution<int>(1, 300)(rng);
      const BucketedCurve got = bucketCurve(p, x0, x1, buckets),
                          want = bruteForce(p, x0, x1, buckets);
      INFO("n=" << n << " trial=" << trial << " buckets=" << buckets);
      CHECK(got.line == want.line);
      CHECK(got.low == want.low);
      CHECK(got.high == want.high);
      CHECK(got.line.size() <= size_t(2 * buckets + 2));
      // The single-precision copy a chart keeps buckets the same as its values in double.
      FloatPoints single;
      Points rounded;
      for (const auto& [x, y] : p) {
        single.emplace_back(float(x), float(y));
        rounded.emplace_back(double(float(x)), double(float(y)));
      }
      const BucketedCurve f = bucketCurve(single, x0, x1, buckets),
                          d = bucketCurve(rounded, x0, x1, buckets);
      CHECK(f.line == d.line);
      CHECK(f.low == d.low);
      CHECK(f.high == d.high);
    }
  }
}

TEST_CASE("one million points bucket to at most two per pixel", "[buckets]") {
  std::mt19937 rng(7);
  const Points p = randomCurve(rng, 1000000, false);
  const BucketedCurve b = bucketCurve(p, p.front().first, p.back().first, 1200);
  CHECK(b.line.size() <= 1200);
  CHECK(b.bucketed());
  // The band holds every value: its extremes are the curve's.
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& q : p) lo = std::min(lo, q.second), hi = std::max(hi, q.second);
  double blo = INFINITY, bhi = -INFINITY;
  for (const auto& q : b.low) blo = std::min(blo, q.second);
  for (const auto& q : b.high) bhi = std::max(bhi, q.second);
  CHECK(blo == lo);
  CHECK(bhi == hi);
}

TEST_CASE("smoothing: EMA and moving average against straightforward loops", "[buckets]") {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(-3, 3);
  for (size_t n : {size_t(0), size_t(1), size_t(13), size_t(1000)}) {
    std::vector<double> y(n);
    for (auto& v : y) v = u(rng);
    if (n > 5) y[2] = NAN, y[4] = INFINITY;
    for (int window : {1, 2, 5, 50}) {
      const std::vector<double> got = movingAverage(y, window);
      REQUIRE(got.size() == n);
      for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(y[i])) {
          CHECK((std::isnan(y[i]) ? std::isnan(got[i]) : got[i] == y[i]));
          continue;
        }
        // The last `window` finite values up to i.
        double sum = 0;
        int count = 0;
        for (size_t j = i + 1; j-- > 0 && count < window;)
          if (std::isfinite(y[j])) sum += y[j], ++count;
        CHECK(got[i] == Approx(sum / count).margin(1e-10));  // a running sum: absolute error
      }
    }
    const double w = 0.8;
    const std::vector<double> ema = detail::debiasedEma(y, w);
    double last = 0;
    int count = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(y[i])) continue;
      last = last * w + (1 - w) * y[i];
      ++count;
      CHECK(ema[i] == Approx(last / (1 - std::pow(w, count))));
    }
  }
}

TEST_CASE("valueAt reads the last point at or before x", "[buckets]") {
  const Points p = {{1, 10}, {2, 20}, {2, 21}, {5, 50}};
  CHECK(std::isnan(valueAt(p, 0.5)));
  CHECK(valueAt(p, 1) == 10);
  CHECK(valueAt(p, 2) == 21);
  CHECK(valueAt(p, 4.9) == 21);
  CHECK(valueAt(p, 99) == 50);
  CHECK(std::isnan(valueAt(Points{}, 1)));
  CHECK(valueAt(FloatPoints{{1.f, 10.f}, {2.f, 20.f}}, 1.5) == 10);
}

namespace {

RunSnapshot snap(const std::string& id, const std::string& recipe, double loss) {
  RunSnapshot s;
  s.id = id;
  s.name = files::baseName(id);
  s.folder.dir = id;
  s.folder.hasConfig = true;
  s.folder.config.recipe = recipe;
  s.folder.state = RunState::Finished;
  s.summary.lastValLoss = loss;
  return s;
}

RunSnapshotsPtr snaps(std::vector<RunSnapshot> v) {
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return std::make_shared<RunSnapshots>(std::move(v));
}

}  // namespace

TEST_CASE("the runs model keeps Qt's model contract through inserts, removals and updates",
          "[runs-model]") {
  fp4lab::testing::FailOnQtWarnings warnings;
  RunTableModel model;
  RunFilterProxy proxy;
  proxy.setSourceModel(&model);
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Warning);
  QAbstractItemModelTester proxyTester(&proxy,
                                       QAbstractItemModelTester::FailureReportingMode::Warning);
  std::mt19937 rng(std::random_device{}());
  std::vector<RunSnapshot> pool;
  for (int i = 0; i < 30; ++i)
    pool.push_back(snap("/r/run" + std::to_string(100 + i), i % 2 ? "qat" : "sft", 1.0 + i));
  for (int round = 0; round < 40; ++round) {
    std::vector<RunSnapshot> pick;
    for (const auto& s : pool)
      if (rng() % 3 != 0) pick.push_back(s), pick.back().summary.lastValLoss = double(rng() % 100);
    const auto next = snaps(pick);
    model.setSnapshots(next);
    REQUIRE(model.rowCount() == int(next->size()));
    for (int r = 0; r < model.rowCount(); ++r) {
      CHECK(model.index(r, 0).data(RunTableModel::IdRole).toString().toStdString() ==
            (*next)[size_t(r)].id);
      CHECK(model.rowOf((*next)[size_t(r)].id) == r);
    }
  }
  model.setSnapshots(snaps({}));
  CHECK(model.rowCount() == 0);
  CHECK(warnings.seen.empty());
}

TEST_CASE("runs model: check boxes, numeric sort and the filter", "[runs-model]") {
  RunTableModel model;
  RunFilterProxy proxy;
  proxy.setSourceModel(&model);
  model.setSnapshots(snaps({snap("/r/b-qat", "qat", 10.0), snap("/r/a-sft", "sft", 9.0),
                            snap("/r/c-qat", "qat", 100.0)}));
  QSignalSpy checked(&model, &RunTableModel::checkedChanged);
  CHECK(model.isChecked("/r/a-sft"));
  REQUIRE(model.setData(model.index(model.rowOf("/r/a-sft"), RunTableModel::Name), Qt::Unchecked,
                        Qt::CheckStateRole));
  CHECK_FALSE(model.isChecked("/r/a-sft"));
  CHECK(checked.count() == 1);
  CHECK(model.checkedIds() == std::set<std::string>{"/r/b-qat", "/r/c-qat"});
  // Numeric: 9 < 10 < 100 (as text "100" < "9").
  proxy.sort(RunTableModel::LastValLoss, Qt::AscendingOrder);
  QStringList order;
  for (int r = 0; r < proxy.rowCount(); ++r) order << proxy.index(r, 0).data().toString();
  CHECK(order == QStringList{"a-sft", "b-qat", "c-qat"});
  proxy.setRecipe("qat");
  CHECK(proxy.rowCount() == 2);
  proxy.setText("c-");
  CHECK(proxy.rowCount() == 1);
  proxy.setRecipe("");
  proxy.setText("sft finished");
  CHECK(proxy.rowCount() == 1);
  proxy.setText("nothing-matches");
  CHECK(proxy.rowCount() == 0);
}

TEST_CASE("format labels and durations", "[runs-model]") {
  run::RunConfig c;
  CHECK(formatLabel(c) == "BF16");
  c.quantFormat = "nvfp4";
  CHECK(formatLabel(c) == "NVFP4 W4A4");
  c.blocks2d = true;
  c.quantActivations = false;
  CHECK(formatLabel(c) == "NVFP4 2D W4A16");
  c.quantFormat = "mxfp4";
  c.scaleRule = "floor";
  CHECK(formatLabel(c) == "MXFP4 W4A16 floor");
  CHECK(formatDuration(12.4) == "12 s");
  CHECK(formatDuration(200) == "3 min 20 s");
  CHECK(formatDuration(3720) == "1 h 02 min");
  CHECK(formatDuration(NAN).isEmpty());
  // One rule per column: significant digits with their trailing zeros.
  CHECK(significant(0.13) == "0.1300");
  CHECK(significant(0.1569) == "0.1569");
  CHECK(significant(20.4) == "20.40");
  CHECK(significant(0.0008, 3) == "0.000800");
  CHECK(significant(0.00048828, 3) == "0.000488");
  CHECK(significant(1234.0) == "1234");
  CHECK(significant(NAN).isEmpty());
}

TEST_CASE("a run's step count: status.json's, else run.yaml's", "[runs-model]") {
  run::RunFolder f;
  f.hasConfig = true;
  f.config.recipe = "ptq";
  f.config.maxSteps = 100;  // the default, which PTQ does not train
  f.state = RunState::Finished;
  f.maxSteps = 0;  // what the runner writes for PTQ
  CHECK(summarize(f, nullptr).maxSteps == 0);
  f.config.recipe = "qat";
  f.maxSteps = 60;
  f.step = 60;
  CHECK(summarize(f, nullptr).maxSteps == 60);
  f.state = RunState::Unknown;  // no status.json (yet): what run.yaml plans
  f.maxSteps = 0;
  f.step = 0;
  CHECK(summarize(f, nullptr).maxSteps == 100);
}

namespace {

// The worker in its own thread, as the window runs it; the test reads what it publishes.
struct WorkerHarness {
  QThread thread;
  LogPollWorker* worker = new LogPollWorker;
  RunSnapshotsPtr last;
  std::vector<std::pair<QString, QString>> problems;
  QObject receiver;
  explicit WorkerHarness(int ms = 100) {
    worker->setIntervalMs(ms);
    worker->moveToThread(&thread);
    QObject::connect(&thread, &QThread::finished, worker, &QObject::deleteLater);
    QObject::connect(worker, &LogPollWorker::snapshotsReady, &receiver,
                     [this](RunSnapshotsPtr s) { last = s; });
    QObject::connect(worker, &LogPollWorker::rootProblem, &receiver,
                     [this](const QString& r, const QString& m) { problems.emplace_back(r, m); });
    thread.start();
  }
  ~WorkerHarness() {
    thread.quit();
    thread.wait();
  }
  void setRoots(const QStringList& roots) {
    QMetaObject::invokeMethod(worker, "setRoots", Qt::QueuedConnection, Q_ARG(QStringList, roots));
  }
  const RunSnapshot* find(const std::string& name) const {
    if (!last) return nullptr;
    for (const auto& r : *last)
      if (r.name == name) return &r;
    return nullptr;
  }
};

}  // namespace

TEST_CASE("the worker finds runs, reads their logs and survives damaged ones", "[worker]") {
  TempDir tmp;
  const std::string root = tmp.file("runs");
  fp4lab::testing::writeRun({root + "/good", {"recipe.name=sft"}, 20, 5});
  // Garbage everywhere a run keeps state.
  files::createDirectories(root + "/garbage");
  files::writeFileAtomically(root + "/garbage/status.json", "{not json");
  files::writeFileAtomically(root + "/garbage/run.yaml", "optim: [unclosed");
  files::writeFileAtomically(root + "/garbage/log.h5", "this is not an HDF5 file");
  // A truncated copy of a good log.
  fp4lab::testing::writeRun({root + "/truncated", {"recipe.name=sft"}, 40, 5});
  {
    const std::string log = files::readFile(root + "/truncated/log.h5");
    files::writeFileAtomically(root + "/truncated/log.h5", log.substr(0, log.size() / 3));
  }
  files::createDirectories(root + "/not-a-run");  // no run files: ignored
  WorkerHarness h;
  h.setRoots({QString::fromStdString(root)});
  REQUIRE(fp4lab::testing::waitFor(
      [&] { return h.find("good") && h.find("truncated") && h.find("garbage"); }));
  const RunSnapshot* good = h.find("good");
  REQUIRE(good->curves);
  CHECK(good->curves->train.size() == 20);
  CHECK(good->summary.lastValLoss == Approx(2.0 / std::sqrt(20.0)));
  CHECK(good->summary.bestValLoss == Approx(2.0 / std::sqrt(20.0)));
  CHECK(good->summary.passRates.at("arith") == Approx(0.5));
  CHECK(good->state() == RunState::Finished);
  const RunSnapshot* garbage = h.find("garbage");
  CHECK(garbage->state() == RunState::Unknown);
  CHECK_FALSE(garbage->folder.configError.empty());
  CHECK_FALSE(garbage->logError.empty());
  CHECK_FALSE(h.find("truncated")->logError.empty());
  CHECK_FALSE(h.find("not-a-run"));
  // Files are only read: the damaged ones are as they were.
  CHECK(files::readFile(root + "/garbage/status.json") == "{not json");

  // A root removed while watched: its runs go, and the problem is said.
  files::removeTree(root);
  REQUIRE(fp4lab::testing::waitFor([&] { return h.last && h.last->empty(); }));
  REQUIRE(fp4lab::testing::waitFor([&] {
    return std::any_of(h.problems.begin(), h.problems.end(),
                       [](const auto& p) { return p.second.contains(QLatin1String("removed")); });
  }));
}

TEST_CASE("the worker follows a log that another thread is writing", "[worker]") {
  TempDir tmp;
  const std::string root = tmp.file("runs"), dir = root + "/live";
  files::createDirectories(dir);
  run::RunConfig c;
  files::writeFileAtomically(dir + "/run.yaml", c.toYaml());
  run::writeRunStatus(dir, RunState::Running, 0, 1000);  // this process's pid: alive
  log::RootAttributes attributes;
  attributes.runId = "live";
  attributes.recipe = "sft";
  log::RunLogSchema schema;
  schema.evalColumns = {"val_loss"};
  auto writer = log::RunLogWriter::create(dir + "/log.h5", attributes, schema);
  WorkerHarness h(100);
  h.setRoots({QString::fromStdString(root)});
  std::atomic<int> written{0};
  std::thread producer([&] {
    for (int step = 1; step <= 300; ++step) {
      log::TrainRow row;
      row.step = step;
      row.loss = 1.0f / float(step);
      writer.appendTrain(row);
      if (step % 50 == 0) writer.flush();
      written = step;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    writer.flush();
  });
  const bool grewLive = fp4lab::testing::waitFor(
      [&] {
        const RunSnapshot* r = h.find("live");
        return r && r->curves && r->curves->train.size() > 0 && r->curves->train.size() < 300;
      },
      8000);
  producer.join();
  CHECK(grewLive);
  REQUIRE(fp4lab::testing::waitFor(
      [&] {
        const RunSnapshot* r = h.find("live");
        return r && r->curves && r->curves->train.size() == 300;
      },
      8000));
  writer.close();
}

TEST_CASE("job events parse from the runner's JSON lines; anything else is console", "[queue]") {
  JobEvent e;
  REQUIRE(parseJobEvent(
      R"({"event":"step","step":12,"max_steps":40,"loss":1.5,"tok_per_s":300,"eta_s":9})", &e));
  CHECK(e.kind == "step");
  CHECK(e.step == 12);
  CHECK(e.maxSteps == 40);
  CHECK(e.loss == 1.5);
  CHECK(e.etaSeconds == 9);
  // The console's line for an event, as a terminal shows the run.
  JobEvent step;
  REQUIRE(parseJobEvent(
      R"({"event":"step","step":12,"max_steps":40,"loss":1.5,"tok_per_s":1520.4,"eta_s":200})",
      &step));
  CHECK(describeJobEvent(step) == "step 12/40  loss 1.5  1520 tok/s  ETA 3 min 20 s");
  JobEvent eval;
  REQUIRE(parseJobEvent(
      R"({"event":"eval","step":10,"max_steps":40,"val_loss":2.05,"val_kl":null})", &eval));
  CHECK(describeJobEvent(eval) == "eval at step 10: val_loss 2.05");
  JobEvent failed;
  REQUIRE(parseJobEvent(R"({"event":"failed","step":0,"max_steps":0,"message":"model.path: gone"})",
                        &failed));
  CHECK(describeJobEvent(failed) == "failed: model.path: gone");
  CHECK_FALSE(parseJobEvent("step 12/40 loss 1.5", &e));
  CHECK_FALSE(parseJobEvent(R"({"event":"step","step":1)", &e));  // cut short
  CHECK_FALSE(parseJobEvent(R"({"no_event":1})", &e));
  CHECK_FALSE(parseJobEvent("", &e));
}

TEST_CASE("the queue: a missing program fails the job, the queue goes on; output is bounded",
          "[queue]") {
  RunQueue queue;
  QSignalSpy finished(&queue, &RunQueue::jobFinished);
  queue.setProgram("/nonexistent/fp4lab");
  REQUIRE(queue.enqueue({"job-a", "a", {"train"}}));
  REQUIRE(fp4lab::testing::waitFor([&] { return finished.count() == 1; }));
  CHECK(finished.at(0).at(1).value<JobState>() == JobState::Failed);
  CHECK(finished.at(0).at(2).toString().contains("missing"));
  // A child that floods its output: the console keeps the last lines only, and a partial line
  // without an end does not grow without bound.
  queue.setProgram("/bin/sh");
  queue.setMaxConsoleLines(100);
  REQUIRE(queue.enqueue({"flood",
                         "flood",
                         {"-c",
                          "i=0; while [ $i -lt 3000 ]; do echo line $i; i=$((i+1)); done; echo "
                          "'{\"event\":\"finished\",\"step\":3}'; exit 0"}}));
  REQUIRE(fp4lab::testing::waitFor([&] { return finished.count() == 2; }, 20000));
  CHECK(finished.at(1).at(1).value<JobState>() == JobState::Finished);
  const QStringList console = queue.console("flood");
  CHECK(console.size() == 101);
  CHECK(console.front().contains("earlier lines not kept"));
  CHECK(console[99] == "line 2999");
  CHECK(console.back() == "finished");  // events read as lines too
  REQUIRE(queue.lastEvent("flood"));
  CHECK(queue.lastEvent("flood")->kind == "finished");
  // One job per device: the second waits for the first.
  REQUIRE(queue.enqueue({"slow", "slow", {"-c", "sleep 1"}}));
  REQUIRE(queue.enqueue({"next", "next", {"-c", "exit 3"}}));
  CHECK(queue.isRunning("slow"));
  CHECK_FALSE(queue.isRunning("next"));
  CHECK(queue.state("next") == JobState::Queued);
  REQUIRE(fp4lab::testing::waitFor([&] { return finished.count() == 4; }, 10000));
  CHECK(queue.state("next") == JobState::Failed);
  CHECK(queue.lastError("next").contains("exit code 3"));
  // A job killed by a signal it did not ask for is crashed; one it stopped is not.
  REQUIRE(queue.enqueue({"crash", "crash", {"-c", "kill -9 $$"}}));
  REQUIRE(fp4lab::testing::waitFor([&] { return finished.count() == 5; }, 10000));
  CHECK(queue.state("crash") == JobState::Crashed);
  // Runs on other devices go at once; "cuda" is GPU 0's slot.
  Job cpu{"on-cpu", "cpu", {"-c", "sleep 1"}};
  Job gpu{"on-gpu", "gpu", {"-c", "sleep 1"}, queueDevice("cuda")};
  Job gpu0{"on-gpu0", "gpu0", {"-c", "exit 0"}, queueDevice("cuda:0")};
  Job gpu1{"on-gpu1", "gpu1", {"-c", "sleep 1"}, queueDevice("cuda:1")};
  for (const Job& j : {cpu, gpu, gpu0, gpu1}) REQUIRE(queue.enqueue(j));
  CHECK(queue.isRunning("on-cpu"));
  CHECK(queue.isRunning("on-gpu"));
  CHECK(queue.isRunning("on-gpu1"));
  CHECK(queue.state("on-gpu0") == JobState::Queued);
  REQUIRE(fp4lab::testing::waitFor([&] { return finished.count() == 9; }, 10000));
  CHECK(queue.state("on-gpu0") == JobState::Finished);
}
