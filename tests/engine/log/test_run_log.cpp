// Tests for the HDF5 run log: exact round trips of every table, resume, precise errors, damaged
// files, and a writer and a reader in two processes (fork) on one live SWMR file.
#include <catch2/catch.hpp>

#include <hdf5.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../temp_dir.h"
#include "fp4lab/error.h"
#include "fp4lab/log/run_log.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using fp4lab::log::EvalRow;
using fp4lab::log::RootAttributes;
using fp4lab::log::RunLogReader;
using fp4lab::log::RunLogSchema;
using fp4lab::log::RunLogWriter;
using fp4lab::log::TrainRow;
using fp4lab::log::WriterState;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kNaND = std::numeric_limits<double>::quiet_NaN();

using TempDir = fp4lab::testing::TempDir;

RootAttributes attributes() {
  RootAttributes a;
  a.runId = "qad-nvfp4-0042";
  a.recipe = "qad";
  a.format = "nvfp4";
  a.createdUtc = "2025-06-01T12:00:00Z";
  a.configYaml = "model: demo\nrecipe: qad\nnote: \"ünïcödé ✓\"\n";
  return a;
}

RunLogSchema fullSchema() {
  RunLogSchema s;
  s.evalColumns = {"val_loss", "val_ppl", "val_kl", "pass_rate_reasoning_language"};
  s.quantLayers = {"model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj", "lm_head"};
  s.quantMetrics = {"sqnr_db", "rel_l2", "cosine"};  // deliberately not alphabetical
  s.blocksPerLayer = {4, 0, 2};
  s.blockRowsPerLayer = {2, 0, 1};
  return s;
}

// Values that need every bit of their type: a lossy conversion anywhere shows up.
TrainRow trainRow(int64_t i) {
  TrainRow r;
  r.step = 3 * i + 1;
  r.tokens = (int64_t{1} << 40) + i * 4096;
  r.wallSeconds = 0.1 * static_cast<double>(i) + 1e-12;
  r.loss = 1.0f / static_cast<float>(i + 3);
  r.lr = 3e-4f * static_cast<float>(i % 7) + 1e-7f;
  r.gradNorm = static_cast<float>(i) * 0.37f;
  r.tokensPerSecond = 12345.678f + static_cast<float>(i);
  return r;
}

EvalRow evalRow(int64_t i, size_t columns) {
  EvalRow r;
  r.step = 100 * (i + 1);
  r.tokens = 409600 * (i + 1);
  r.wallSeconds = 10.0 / 3.0 * static_cast<double>(i + 1);
  for (size_t c = 0; c < columns; ++c)
    r.values.push_back(1.0 / static_cast<double>(i + 1) + static_cast<double>(c) * 1e-9);
  return r;
}

bool same(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

void checkTrain(const TrainRow& got, const TrainRow& want) {
  CHECK(got.step == want.step);
  CHECK(got.tokens == want.tokens);
  CHECK(same(got.wallSeconds, want.wallSeconds));
  CHECK(same(got.loss, want.loss));
  CHECK(same(got.lr, want.lr));
  CHECK(same(got.gradNorm, want.gradNorm));
  CHECK(same(got.tokensPerSecond, want.tokensPerSecond));
}

void checkEval(const EvalRow& got, const EvalRow& want) {
  CHECK(got.step == want.step);
  CHECK(got.tokens == want.tokens);
  CHECK(same(got.wallSeconds, want.wallSeconds));
  REQUIRE(got.values.size() == want.values.size());
  for (size_t c = 0; c < want.values.size(); ++c) CHECK(same(got.values[c], want.values[c]));
}

// metric m, layer l at quant row k.
float quantValue(size_t m, size_t l, int64_t k) {
  return static_cast<float>(m) * 100.0f + static_cast<float>(l) + static_cast<float>(k) / 8.0f;
}

std::vector<std::vector<float>> quantRow(const RunLogSchema& s, int64_t k) {
  std::vector<std::vector<float>> values(s.quantMetrics.size(),
                                         std::vector<float>(s.quantLayers.size()));
  for (size_t m = 0; m < values.size(); ++m)
    for (size_t l = 0; l < values[m].size(); ++l) values[m][l] = quantValue(m, l, k);
  return values;
}

// "2025-06-01T12:00:00.123Z kind text" -> {kind, text}; {"", ""} when the time stamp is malformed.
std::pair<std::string, std::string> splitEvent(const std::string& line) {
  const std::string shape = "dddd-dd-ddTdd:dd:dd.dddZ ";
  if (line.size() < shape.size()) return {};
  for (size_t i = 0; i < shape.size(); ++i) {
    const bool ok = shape[i] == 'd' ? std::isdigit(static_cast<unsigned char>(line[i])) != 0
                                    : line[i] == shape[i];
    if (!ok) return {};
  }
  const size_t space = line.find(' ', shape.size());
  if (space == std::string::npos) return {};
  return {line.substr(shape.size(), space - shape.size()), line.substr(space + 1)};
}

std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs `body` and requires it to throw an fp4lab::Error whose message contains `text`.
template <typename Body>
void requireError(Body&& body, const std::string& text) {
  try {
    body();
    FAIL("expected an fp4lab::Error containing: " << text);
  } catch (const fp4lab::Error& error) {
    INFO("message: " << error.what());
    CHECK_THAT(std::string(error.what()), Contains(text));
  }
}

// ---- Two processes ------------------------------------------------------------------------------

struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() { REQUIRE(::pipe(fds) == 0); }
  ~Pipe() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
  void send(char c) const { REQUIRE(::write(fds[1], &c, 1) == 1); }
};

// The next byte from a pipe, or 0 after `timeoutMs` (a stuck peer must not hang the suite).
char receive(int fd, int timeoutMs) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeoutMs) != 1) return 0;
  char c = 0;
  return ::read(fd, &c, 1) == 1 ? c : 0;
}

// Kills and reaps a child still running when a failed REQUIRE leaves the test.
class ChildGuard {
 public:
  explicit ChildGuard(pid_t pid) : m_pid(pid) {}
  ~ChildGuard() {
    if (m_pid > 0) {
      ::kill(m_pid, SIGKILL);
      ::waitpid(m_pid, nullptr, 0);
    }
  }
  // Waits up to `timeoutMs`; returns the exit status, or -1 on timeout.
  int wait(int timeoutMs) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(m_pid, &status, WNOHANG) == m_pid) {
        m_pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return -1;
  }
  // Non-blocking: true (and reaped) once the child has exited.
  bool exited(int* code) {
    int status = 0;
    if (::waitpid(m_pid, &status, WNOHANG) != m_pid) return false;
    m_pid = -1;
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return true;
  }

 private:
  pid_t m_pid;
};

// Child side: never returns into Catch2; the exit code says what went wrong.
template <typename Body>
[[noreturn]] void runChild(Body&& body) {
  int code = 0;
  try {
    code = body();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "child: %s\n", error.what());
    code = 90;
  } catch (...) {
    code = 91;
  }
  std::fflush(stderr);
  ::_exit(code);
}

}  // namespace

TEST_CASE("a log round-trips every table exactly", "[log]") {
  TempDir dir;
  const std::string path = dir.file("log.h5");
  const RunLogSchema schema = fullSchema();
  RootAttributes attrs = attributes();
  attrs.configYaml += std::string(200000, 'x');  // larger than an object header can hold

  const int64_t trainCount = 600;  // crosses two 256-row chunk boundaries
  {
    RunLogWriter writer = RunLogWriter::create(path, attrs, schema);
    writer.event("start", "demo run");
    for (int64_t i = 0; i < trainCount; ++i) writer.appendTrain(trainRow(i));
    for (int64_t i = 0; i < 5; ++i) writer.appendEval(evalRow(i, schema.evalColumns.size()));
    for (int64_t k = 0; k < 3; ++k) writer.appendQuant(50 * (k + 1), quantRow(schema, k));
    // Row 2 gets blocks for layers 0 and 2; rows 0 and 1 only for one layer each.
    writer.appendBlocks(150, 0, {0.5f, 1.5f, 2.5f, 3.5f});
    writer.appendBlocks(150, 2, {7.0f, 8.0f});
    writer.event("checkpoint", "step 1798");
    writer.event("end", "finished");
    writer.close();
    writer.close();  // idempotent
    CHECK_FALSE(writer.isOpen());
  }
  CHECK(RunLogReader::writerState(path) == WriterState::Closed);

  RunLogReader reader(path);
  CHECK(reader.isSwmr());
  const RootAttributes got = reader.attributes();
  CHECK(got.schemaVersion == 1);
  CHECK(got.runId == attrs.runId);
  CHECK(got.recipe == attrs.recipe);
  CHECK(got.format == attrs.format);
  CHECK(got.createdUtc == attrs.createdUtc);
  CHECK(got.configYaml == attrs.configYaml);

  const RunLogSchema gotSchema = reader.schema();
  CHECK(gotSchema.evalColumns == schema.evalColumns);
  CHECK(gotSchema.quantLayers == schema.quantLayers);
  CHECK(gotSchema.quantMetrics == schema.quantMetrics);
  CHECK(gotSchema.blocksPerLayer == schema.blocksPerLayer);
  CHECK(gotSchema.blockRowsPerLayer == schema.blockRowsPerLayer);

  REQUIRE(reader.trainRows() == trainCount);
  REQUIRE(reader.evalRows() == 5);
  REQUIRE(reader.quantRows() == 3);
  REQUIRE(reader.eventRows() == 3);

  const std::vector<TrainRow> train = reader.readTrain(0, trainCount);
  REQUIRE(train.size() == static_cast<size_t>(trainCount));
  for (int64_t i = 0; i < trainCount; ++i) checkTrain(train[i], trainRow(i));
  // A range inside the table, one across a chunk boundary, and clamping.
  const std::vector<TrainRow> middle = reader.readTrain(250, 260);
  REQUIRE(middle.size() == 10);
  for (int64_t i = 0; i < 10; ++i) checkTrain(middle[i], trainRow(250 + i));
  CHECK(reader.readTrain(590, 10000).size() == 10);
  CHECK(reader.readTrain(-5, 2).size() == 2);
  CHECK(reader.readTrain(7, 3).empty());
  CHECK(reader.readTrain(trainCount, trainCount + 5).empty());

  const std::vector<EvalRow> eval = reader.readEval(0, 100);
  REQUIRE(eval.size() == 5);
  for (int64_t i = 0; i < 5; ++i) checkEval(eval[i], evalRow(i, schema.evalColumns.size()));
  const std::vector<EvalRow> lastEval = reader.readEval(4, 5);
  REQUIRE(lastEval.size() == 1);
  checkEval(lastEval[0], evalRow(4, schema.evalColumns.size()));

  CHECK(reader.quantSteps(0, 3) == std::vector<int64_t>{50, 100, 150});
  CHECK(reader.quantSteps(1, 2) == std::vector<int64_t>{100});
  for (size_t m = 0; m < schema.quantMetrics.size(); ++m) {
    const std::vector<float> matrix = reader.readQuant(schema.quantMetrics[m], 0, 3);
    REQUIRE(matrix.size() == 3 * schema.quantLayers.size());
    for (int64_t k = 0; k < 3; ++k)
      for (size_t l = 0; l < schema.quantLayers.size(); ++l)
        CHECK(matrix[k * schema.quantLayers.size() + l] == quantValue(m, l, k));
  }
  const std::vector<float> lastRow = reader.readQuant("cosine", 2, 3);
  REQUIRE(lastRow.size() == 3);
  CHECK(lastRow[1] == quantValue(2, 1, 2));

  const std::vector<float> blocks0 = reader.readBlocks(0, 0, 3);
  REQUIRE(blocks0.size() == 12);
  for (int i = 0; i < 8; ++i) CHECK(std::isnan(blocks0[i]));  // rows 0, 1: never logged
  CHECK(std::vector<float>(blocks0.begin() + 8, blocks0.end()) ==
        std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f});
  const std::vector<float> blocks2 = reader.readBlocks(2, 2, 3);
  CHECK(blocks2 == std::vector<float>{7.0f, 8.0f});

  const std::vector<std::string> events = reader.events();
  REQUIRE(events.size() == 3);
  CHECK(splitEvent(events[0]) == std::make_pair<std::string, std::string>("start", "demo run"));
  CHECK(splitEvent(events[1]) ==
        std::make_pair<std::string, std::string>("checkpoint", "step 1798"));
  CHECK(splitEvent(events[2]) == std::make_pair<std::string, std::string>("end", "finished"));

  CHECK(reader.listSeries() ==
        std::vector<std::string>{"train/loss", "train/lr", "train/grad_norm", "train/tok_per_s",
                                 "eval/val_loss", "eval/val_ppl", "eval/val_kl",
                                 "eval/pass_rate_reasoning_language", "quant/sqnr_db",
                                 "quant/rel_l2", "quant/cosine"});
  CHECK_FALSE(reader.refresh());  // a finished log does not grow
}

TEST_CASE("NaN means not measured and survives the round trip", "[log]") {
  TempDir dir;
  const std::string path = dir.file("log.h5");
  const RunLogSchema schema = fullSchema();
  {
    RunLogWriter writer = RunLogWriter::create(path, attributes(), schema);
    TrainRow onlyLoss;  // every float defaults to NaN
    onlyLoss.step = 1;
    onlyLoss.loss = 2.5f;
    writer.appendTrain(onlyLoss);
    TrainRow nothing;
    nothing.step = 2;
    nothing.wallSeconds = kNaND;
    writer.appendTrain(nothing);
    writer.appendEval({10, 20, 1.0, {kNaND, 3.0, kNaND, 0.75}});
    std::vector<std::vector<float>> quant = quantRow(schema, 0);
    quant[1][2] = kNaN;
    writer.appendQuant(10, quant);
  }
  RunLogReader reader(path);
  const std::vector<TrainRow> train = reader.readTrain(0, 2);
  REQUIRE(train.size() == 2);
  CHECK(train[0].loss == 2.5f);
  CHECK(std::isnan(train[0].lr));
  CHECK(std::isnan(train[0].gradNorm));
  CHECK(std::isnan(train[0].tokensPerSecond));
  CHECK(train[1].step == 2);
  CHECK(std::isnan(train[1].loss));
  CHECK(std::isnan(train[1].wallSeconds));
  const std::vector<EvalRow> eval = reader.readEval(0, 1);
  REQUIRE(eval.size() == 1);
  checkEval(eval[0], {10, 20, 1.0, {kNaND, 3.0, kNaND, 0.75}});
  CHECK_FALSE(std::isnan(eval[0].values[1]));
  const std::vector<float> relL2 = reader.readQuant("rel_l2", 0, 1);
  REQUIRE(relL2.size() == 3);
  CHECK(relL2[0] == quantValue(1, 0, 0));
  CHECK(std::isnan(relL2[2]));
}

TEST_CASE("eval tables hold any number of columns, in schema order", "[log]") {
  TempDir dir;
  const size_t columns = GENERATE(size_t{0}, size_t{1}, size_t{40});
  RunLogSchema schema;
  for (size_t c = 0; c < columns; ++c)
    schema.evalColumns.push_back("pass_rate_task_" + std::to_string(columns - c));
  const std::string path = dir.file("log.h5");
  {
    RunLogWriter writer = RunLogWriter::create(path, attributes(), schema);
    for (int64_t i = 0; i < 70; ++i) writer.appendEval(evalRow(i, columns));
  }
  RunLogReader reader(path);
  CHECK(reader.schema().evalColumns == schema.evalColumns);
  CHECK(reader.schema().quantLayers.empty());
  CHECK(reader.schema().blocksPerLayer.empty());
  const std::vector<EvalRow> eval = reader.readEval(0, 70);
  REQUIRE(eval.size() == 70);
  for (int64_t i = 0; i < 70; ++i) checkEval(eval[i], evalRow(i, columns));
  CHECK(reader.listSeries().size() == 4 + columns);
}

TEST_CASE("a log without quantized layers still records quant steps", "[log]") {
  TempDir dir;
  const std::string path = dir.file("log.h5");
  {
    RunLogWriter writer = RunLogWriter::create(path, attributes(), RunLogSchema{});
    writer.appendQuant(5, {});
    writer.appendQuant(9, {});
    requireError([&] { writer.appendQuant(10, {{1.0f}}); }, "got 1 metrics, the log has 0");
    requireError([&] { writer.appendBlocks(9, 0, {}); }, "no per-block data");
  }
  RunLogReader reader(path);
  CHECK(reader.quantRows() == 2);
  CHECK(reader.quantSteps(0, 10) == std::vector<int64_t>{5, 9});
  requireError([&] { reader.readQuant("sqnr_db", 0, 1); }, "no quant metric 'sqnr_db'");
  requireError([&] { reader.readBlocks(0, 0, 1); }, "no per-block data for layer 0");
}

TEST_CASE("logs without block rows read as rows unknown", "[log]") {
  // Logs written before blockRowsPerLayer existed have no `rows` attribute: 0 for each layer.
  TempDir dir;
  const std::string path = dir.file("log.h5");
  RunLogSchema schema = fullSchema();
  schema.blockRowsPerLayer.clear();
  RunLogWriter::create(path, attributes(), schema).close();
  const RunLogSchema got = RunLogReader(path).schema();
  CHECK(got.blocksPerLayer == schema.blocksPerLayer);
  CHECK(got.blockRowsPerLayer == std::vector<int64_t>{0, 0, 0});
}

TEST_CASE("events are single fixed-length lines", "[log]") {
  TempDir dir;
  const std::string path = dir.file("log.h5");
  std::string accents;
  for (int i = 0; i < 200; ++i) accents += "\xC3\xA9";  // 'é' is two bytes: 400 bytes of text
  {
    RunLogWriter writer = RunLogWriter::create(path, attributes(), RunLogSchema{});
    writer.event("warning", "line one\nline two\r\tend");
    writer.event("warning", accents);
    writer.event("checkpoint_2", std::string(1000, 'a'));
    requireError([&] { writer.event("", "x"); }, "invalid event kind");
    requireError([&] { writer.event("Start", "x"); }, "invalid event kind");
    requireError([&] { writer.event("two words", "x"); }, "invalid event kind");
    requireError([&] { writer.event(std::string(17, 'k'), "x"); }, "invalid event kind");
  }
  RunLogReader reader(path);
  const std::vector<std::string> events = reader.events();
  REQUIRE(events.size() == 3);  // rejected kinds wrote nothing
  CHECK_THAT(events[0], Catch::Matchers::EndsWith(" warning line one line two  end"));
  CHECK(events[0].find('\n') == std::string::npos);
  // Cut at 255 bytes without splitting a two-byte character.
  CHECK(events[1].size() <= 255);
  CHECK(events[1].size() >= 254);
  const size_t textStart = events[1].find(" warning ") + 9;
  CHECK((events[1].size() - textStart) % 2 == 0);
  CHECK(events[1].substr(textStart) == accents.substr(0, events[1].size() - textStart));
  CHECK(events[2].size() == 255);
}

TEST_CASE("resume drops rows past the kept step and appends after them", "[log]") {
  TempDir dir;
  const std::string path = dir.file("log.h5");
  const RunLogSchema schema = fullSchema();
  {
    RunLogWriter writer = RunLogWriter::create(path, attributes(), schema);
    writer.event("start", "first segment");
    for (int64_t step = 1; step <= 100; ++step) {
      TrainRow row = trainRow(step);
      row.step = step;
      writer.appendTrain(row);
      if (step % 10 == 0) {
        EvalRow eval = evalRow(step, schema.evalColumns.size());
        eval.step = step;
        writer.appendEval(eval);
      }
      if (step % 25 == 0) {
        writer.appendQuant(step, quantRow(schema, step));
        writer.appendBlocks(step, 0, std::vector<float>(4, static_cast<float>(step)));
      }
    }
    writer.event("end", "stopped");
  }

  {
    RunLogWriter writer = RunLogWriter::resume(path, 60);
    requireError([&] { writer.appendTrain(trainRow(10)); }, "comes after step 60");
    for (int64_t step = 61; step <= 70; ++step) {
      TrainRow row = trainRow(1000 + step);  // values differ from the dropped rows
      row.step = step;
      writer.appendTrain(row);
    }
    EvalRow eval = evalRow(7, schema.evalColumns.size());
    eval.step = 70;
    writer.appendEval(eval);
    writer.appendQuant(70, quantRow(schema, 70));
    writer.appendBlocks(70, 0, {9, 9, 9, 9});
  }

  {
    // A reader and a writer of one file must not share a process: this one closes first.
    RunLogReader reader(path);
    REQUIRE(reader.trainRows() == 70);
    const std::vector<TrainRow> train = reader.readTrain(0, 70);
    for (int64_t i = 0; i < 70; ++i) {
      const int64_t step = i + 1;
      TrainRow want = trainRow(step <= 60 ? step : 1000 + step);
      want.step = step;
      checkTrain(train[i], want);
    }
    REQUIRE(reader.evalRows() == 7);  // steps 10..60, then 70
    const std::vector<EvalRow> eval = reader.readEval(0, 7);
    CHECK(eval[5].step == 60);
    CHECK(eval[6].step == 70);
    CHECK(eval[6].values == evalRow(7, schema.evalColumns.size()).values);
    CHECK(reader.quantSteps(0, 10) == std::vector<int64_t>{25, 50, 70});
    const std::vector<float> sqnr = reader.readQuant("sqnr_db", 0, 3);
    CHECK(sqnr[2 * 3 + 1] == quantValue(0, 1, 70));
    const std::vector<float> blocks = reader.readBlocks(0, 0, 3);
    CHECK(blocks == std::vector<float>{25, 25, 25, 25, 50, 50, 50, 50, 9, 9, 9, 9});
    const std::vector<std::string> events = reader.events();
    REQUIRE(events.size() == 3);  // events are history: none are dropped
    CHECK_THAT(events[2],
               Contains(" resume kept steps <= 60, dropped 40 train, 4 eval, 2 quant rows"));
  }
  CHECK(RunLogReader::writerState(path) == WriterState::Closed);

  // Resuming again from a step past the end keeps everything.
  { RunLogWriter writer = RunLogWriter::resume(path, 1000); }
  RunLogReader again(path);
  CHECK(again.trainRows() == 70);
  CHECK_THAT(again.events().back(), Contains("dropped 0 train, 0 eval, 0 quant rows"));
}

TEST_CASE("writers move and close on destruction", "[log]") {
  TempDir dir;
  const std::string path = dir.file("log.h5");
  {
    RunLogWriter first = RunLogWriter::create(path, attributes(), RunLogSchema{});
    RunLogWriter second = std::move(first);
    second.appendTrain(trainRow(0));
    CHECK(second.path() == path);
    requireError([&] { first.appendTrain(trainRow(1)); }, "closed");
    RunLogWriter third = RunLogWriter::create(dir.file("other.h5"), attributes(), RunLogSchema{});
    third = std::move(second);  // closes other.h5
    third.appendTrain(trainRow(1));
    CHECK(RunLogReader::writerState(dir.file("other.h5")) == WriterState::Closed);
  }
  CHECK(RunLogReader::writerState(path) == WriterState::Closed);
  RunLogReader reader(path);
  CHECK(reader.trainRows() == 2);
}

TEST_CASE("bad input is an fp4lab::Error with a hint", "[log]") {
  TempDir dir;
  const std::string path = dir.file("log.h5");

  SECTION("missing file") {
    requireError([&] { RunLogReader reader(path); }, "no such file");
    requireError([&] { RunLogWriter::resume(path, 0); }, "no such file");
    requireError([&] { RunLogReader::writerState(path); }, "no such file");
  }
  SECTION("not an HDF5 file") {
    writeBytes(path, "step,loss\n1,2.5\n");
    requireError([&] { RunLogReader reader(path); }, "not an HDF5 file");
    requireError([&] { RunLogWriter::resume(path, 0); }, "not an HDF5 file");
    writeBytes(path, "");
    requireError([&] { RunLogReader reader(path); }, "not an HDF5 file");
    requireError([&] { RunLogReader reader(dir.file("")); }, "not a regular file");
  }
  SECTION("an HDF5 file that is not a run log") {
    {
      const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
      REQUIRE(file >= 0);
      H5Fclose(file);
    }
    requireError([&] { RunLogReader reader(path); }, "no schema_version");
    requireError([&] { RunLogWriter::resume(path, 0); }, "no schema_version");
  }
  SECTION("a log from a newer schema") {
    RunLogWriter::create(path, attributes(), RunLogSchema{}).close();
    {
      const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
      REQUIRE(file >= 0);
      const int64_t two = 2;
      const hid_t attribute = H5Aopen(file, "schema_version", H5P_DEFAULT);
      REQUIRE(H5Awrite(attribute, H5T_NATIVE_INT64, &two) >= 0);
      H5Aclose(attribute);
      H5Fclose(file);
    }
    requireError([&] { RunLogReader reader(path); }, "schema 2 is not supported");
  }
  SECTION("create never overwrites") {
    writeBytes(path, "precious");
    requireError([&] { RunLogWriter::create(path, attributes(), RunLogSchema{}); },
                 "already exists");
    CHECK(readBytes(path) == "precious");
    const std::string log = dir.file("existing.h5");
    {
      RunLogWriter writer = RunLogWriter::create(log, attributes(), RunLogSchema{});
      writer.appendTrain(trainRow(0));
    }
    requireError([&] { RunLogWriter::create(log, attributes(), fullSchema()); }, "already exists");
    CHECK(RunLogReader(log).trainRows() == 1);
  }
  SECTION("create in a missing folder") {
    const std::string nowhere = dir.file("no/such/folder/log.h5");
    requireError([&] { RunLogWriter::create(nowhere, attributes(), RunLogSchema{}); },
                 "cannot create the run log");
    CHECK_FALSE(fs::exists(nowhere));
  }
  SECTION("invalid schemas are refused before a file exists") {
    RunLogSchema schema = fullSchema();
    std::string expected;
    switch (GENERATE(0, 1, 2, 3, 4, 5, 6, 7, 8, 9)) {
      case 0:
        schema.evalColumns = {"val_loss", "val_loss"}, expected = "duplicate name";
        break;
      case 1:
        schema.evalColumns = {"step"}, expected = "reserved name 'step'";
        break;
      case 2:
        schema.quantMetrics = {"a/b"}, expected = "invalid name 'a/b'";
        break;
      case 3:
        schema.quantMetrics = {"layers"}, expected = "reserved name 'layers'";
        break;
      case 4:
        schema.quantLayers.clear(), schema.blocksPerLayer.clear(), schema.blockRowsPerLayer.clear(),
            expected = "quantMetrics given but no quantLayers";
        break;
      case 5:
        schema.blocksPerLayer = {1, 2}, expected = "2 entries for 3 layers";
        break;
      case 6:
        schema.quantLayers[1] = "", expected = "empty name";
        break;
      case 7:
        schema.blocksPerLayer[0] = -1, expected = "negative block count";
        break;
      case 8:
        schema.blockRowsPerLayer = {2, 0}, expected = "2 entries for 3 block counts";
        break;
      case 9:
        schema.blockRowsPerLayer = {3, 0, 1}, expected = "does not divide the layer's 4 blocks";
        break;
    }
    requireError([&] { RunLogWriter::create(path, attributes(), schema); }, expected);
    CHECK_FALSE(fs::exists(path));
    RootAttributes future = attributes();
    future.schemaVersion = 2;
    requireError([&] { RunLogWriter::create(path, future, RunLogSchema{}); },
                 "cannot write schema 2");
    CHECK_FALSE(fs::exists(path));
  }
  SECTION("appends that do not fit the schema") {
    const RunLogSchema schema = fullSchema();
    RunLogWriter writer = RunLogWriter::create(path, attributes(), schema);
    requireError(
        [&] {
          writer.appendEval({1, 1, 1, {1.0, 2.0}});
        },
        "eval row has 2 values for 4 columns");
    requireError([&] { writer.appendQuant(1, {{1, 2, 3}}); }, "got 1 metrics, the log has 3");
    std::vector<std::vector<float>> shortRow = quantRow(schema, 0);
    shortRow[2].pop_back();
    requireError([&] { writer.appendQuant(1, shortRow); },
                 "metric cosine has 2 values for 3 layers");
    requireError([&] { writer.appendBlocks(1, 0, {1, 2, 3, 4}); }, "no /quant row for step 1");
    writer.appendQuant(1, quantRow(schema, 0));
    requireError([&] { writer.appendBlocks(2, 0, {1, 2, 3, 4}); }, "no /quant row for step 2");
    requireError([&] { writer.appendBlocks(1, 0, {1, 2, 3}); }, "got 3 values for 4 blocks");
    requireError([&] { writer.appendBlocks(1, 1, {1}); }, "declared with 0 blocks");
    requireError([&] { writer.appendBlocks(1, 3, {1}); }, "layer 3 is out of range");
    requireError([&] { writer.appendQuant(0, quantRow(schema, 0)); }, "comes after step 1");
    writer.appendTrain(trainRow(5));
    requireError([&] { writer.appendTrain(trainRow(4)); }, "steps must not decrease");
    writer.appendTrain(trainRow(5));  // a repeated step is allowed
    writer.close();
    requireError([&] { writer.appendTrain(trainRow(6)); }, "writer is closed");
    requireError([&] { writer.event("end", "x"); }, "writer is closed");
    RunLogReader reader(path);
    CHECK(reader.trainRows() == 2);
    CHECK(reader.evalRows() == 0);
    CHECK(reader.quantRows() == 1);
    requireError([&] { reader.readQuant("mse", 0, 1); }, "the log has: sqnr_db, rel_l2, cosine");
    requireError([&] { reader.readBlocks(1, 0, 1); }, "no per-block data for layer 1");
  }
}

TEST_CASE("damaged logs throw fp4lab::Error and never crash", "[log]") {
  TempDir dir;
  const std::string good = dir.file("good.h5");
  {
    RunLogWriter writer = RunLogWriter::create(good, attributes(), fullSchema());
    for (int64_t i = 0; i < 300; ++i) writer.appendTrain(trainRow(i));
    writer.appendEval(evalRow(0, 4));
    writer.appendQuant(1, quantRow(fullSchema(), 0));
    writer.appendBlocks(1, 2, {1, 2});
    writer.event("end", "done");
  }
  const std::string bytes = readBytes(good);
  REQUIRE(bytes.size() > 4096);

  // Variants: truncations, then single-byte corruptions at random offsets (fixed seed).
  std::vector<std::string> variants;
  for (size_t size : {size_t{0}, size_t{8}, size_t{11}, size_t{12}, size_t{47}, size_t{200},
                      bytes.size() / 4, bytes.size() / 2, bytes.size() - 1})
    variants.push_back(bytes.substr(0, size));
  const size_t truncations = variants.size();
  std::mt19937 random(1234);
  for (int i = 0; i < 150; ++i) {
    std::string damaged = bytes;
    const size_t at = std::uniform_int_distribution<size_t>(0, bytes.size() - 1)(random);
    damaged[at] = static_cast<char>(damaged[at] ^ (1 + random() % 255));
    variants.push_back(damaged);
  }

  // A child process reads every variant, answering one byte each: 'E' fp4lab::Error, 'S' read
  // fine, 'X' any other exception, 'L' files or objects left open. A crash shows as a short answer.
  // The child also keeps HDF5 1.10.8's own leak (about 424 bytes each time it fails to load a
  // damaged object header) out of LeakSanitizer's report: _exit skips the leak check.
  const std::string path = dir.file("damaged.h5");
  Pipe answers;
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    runChild([&] {
      // Files and everything opened in them (datasets, groups, attributes). HDF5 offers no
      // public count of transient types and dataspaces.
      const auto openIds = [] { return H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL); };
      const ssize_t idsBefore = openIds();
      for (const std::string& variant : variants) {
        writeBytes(path, variant);
        char answer = 'S';
        try {
          RunLogReader reader(path);
          reader.refresh();
          reader.readTrain(0, reader.trainRows());
          reader.readEval(0, reader.evalRows());
          reader.quantSteps(0, reader.quantRows());
          for (const std::string& metric : reader.schema().quantMetrics)
            reader.readQuant(metric, 0, reader.quantRows());
          for (size_t layer : {size_t{0}, size_t{2}}) reader.readBlocks(layer, 0, 1);
          reader.events();
          RunLogReader::writerState(path);
        } catch (const fp4lab::Error&) {
          answer = 'E';
        } catch (...) {
          answer = 'X';
        }
        // Failures must not leave files or datasets open in a GUI that runs for days.
        if (openIds() != idsBefore) answer = 'L';
        answers.send(answer);
      }
      return 0;
    });
  }
  ChildGuard child(pid);
  ::close(answers.fds[1]);
  answers.fds[1] = -1;
  std::string got;
  for (char c; (c = receive(answers.fds[0], 20000)) != 0;) got += c;
  const int exitCode = child.wait(5000);
  INFO("answers: " << got);
  REQUIRE(got.size() == variants.size());  // else variant got.size() crashed the reader
  CHECK(exitCode == 0);
  CHECK(got.find('X') == std::string::npos);
  CHECK(got.find('L') == std::string::npos);
  // Every cut loses metadata except perhaps a cut of the very last byte.
  CHECK(got.substr(0, truncations - 1) == std::string(truncations - 1, 'E'));
  // Metadata is checksummed, so many flips are caught; flips in raw data are not.
  const auto caught = std::count(got.begin() + static_cast<long>(truncations), got.end(), 'E');
  CHECK(caught >= 10);
  CHECK(caught < 150);
}

TEST_CASE("a second process sees rows appear while the writer appends", "[log][swmr]") {
  TempDir dir;
  const std::string path = dir.file("log.h5");
  constexpr int64_t kRows = 2000;
  constexpr int64_t kMilestone = 500;
  Pipe toParent, toChild;
  RunLogSchema schema;
  schema.evalColumns = {"val_loss"};

  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    runChild([&] {
      RunLogWriter writer = RunLogWriter::create(path, attributes(), schema);
      writer.event("start", "child writer");
      toParent.send('c');
      if (receive(toChild.fds[0], 10000) != 'g') return 3;
      for (int64_t i = 0; i < kRows; ++i) {
        writer.appendTrain(trainRow(i));
        if ((i + 1) % 100 == 0) {
          writer.flush();
          std::this_thread::sleep_for(std::chrono::milliseconds(15));
        }
        if ((i + 1) % 500 == 0) writer.appendEval({i, i, 0.5, {static_cast<double>(i)}});
        // At 500, 1000 and 1500 rows, wait until the reader has seen them: proves the rows are
        // visible while the writer runs, however slow the machine.
        if ((i + 1) % kMilestone == 0 && i + 1 < kRows && receive(toChild.fds[0], 10000) != 'm')
          return 4;
      }
      writer.event("end", "child done");
      writer.close();
      return 0;
    });
  }
  ChildGuard child(pid);
  REQUIRE(receive(toParent.fds[0], 10000) == 'c');

  // The reader starts before any row exists.
  RunLogReader reader(path);
  CHECK(reader.isSwmr());
  CHECK(reader.trainRows() == 0);
  CHECK(reader.evalRows() == 0);
  CHECK(reader.schema().evalColumns == schema.evalColumns);
  CHECK(RunLogReader::writerState(path) == WriterState::Live);
  toChild.send('g');

  // Poll like the GUI's worker: refresh, then read only the rows past the last one read.
  std::vector<int64_t> counts;  // distinct row counts seen while the writer ran
  int64_t read = 0;
  int64_t nextMilestone = kMilestone;
  int exitCode = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!child.exited(&exitCode)) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    const bool grew = reader.refresh();
    const int64_t rows = reader.trainRows();
    CHECK(rows >= read);
    if (!counts.empty() && rows != counts.back()) CHECK(grew);  // refresh() reports growth
    if (counts.empty() || rows != counts.back()) counts.push_back(rows);
    const std::vector<TrainRow> fresh = reader.readTrain(read, rows);
    for (size_t i = 0; i < fresh.size(); ++i) {
      const TrainRow want = trainRow(read + static_cast<int64_t>(i));
      if (fresh[i].step != want.step || fresh[i].loss != want.loss) {
        FAIL("row " << read + static_cast<int64_t>(i) << " read live differs: step "
                    << fresh[i].step << " loss " << fresh[i].loss);
      }
    }
    read = rows;
    if (rows >= nextMilestone && nextMilestone < kRows) {
      CHECK(rows == nextMilestone);  // the writer waits there
      nextMilestone += kMilestone;
      toChild.send('m');
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE(exitCode == 0);
  CHECK(nextMilestone == kRows);
  INFO("row counts seen live: " << counts.size());
  int distinctLive = 0;
  for (size_t i = 1; i < counts.size(); ++i) {
    CHECK(counts[i] > counts[i - 1]);
    if (counts[i] > 0 && counts[i] < kRows) ++distinctLive;
  }
  CHECK(distinctLive >= 3);

  reader.refresh();
  REQUIRE(reader.trainRows() == kRows);
  const std::vector<TrainRow> all = reader.readTrain(0, kRows);
  for (int64_t i = 0; i < kRows; ++i) checkTrain(all[i], trainRow(i));
  REQUIRE(reader.evalRows() == 4);
  CHECK(reader.readEval(3, 4)[0].values == std::vector<double>{1999.0});
  const std::vector<std::string> events = reader.events();
  REQUIRE(events.size() == 2);
  CHECK_THAT(events[1], Contains(" end child done"));
  CHECK(RunLogReader::writerState(path) == WriterState::Closed);
}

TEST_CASE("a crashed SWMR writer's log can be read and resumed", "[log][swmr]") {
  TempDir dir;
  const std::string path = dir.file("log.h5");
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    runChild([&] {
      RunLogWriter writer = RunLogWriter::create(path, attributes(), fullSchema());
      for (int64_t i = 0; i < 100; ++i) writer.appendTrain(trainRow(i));
      writer.appendEval(evalRow(0, 4));
      writer.flush();
      writer.appendTrain(trainRow(100));  // never flushed: lost with the process
      std::fflush(stderr);
      ::_exit(0);  // dies without closing: the SWMR flags stay set
      return 1;
    });
  }
  ChildGuard child(pid);
  REQUIRE(child.wait(10000) == 0);

  CHECK(RunLogReader::writerState(path) == WriterState::Crashed);
  {
    RunLogReader reader(path);
    CHECK(reader.isSwmr());
    REQUIRE(reader.trainRows() >= 100);
    const std::vector<TrainRow> rows = reader.readTrain(0, 100);
    for (int64_t i = 0; i < 100; ++i) checkTrain(rows[i], trainRow(i));
  }
  {
    RunLogWriter writer = RunLogWriter::resume(path, trainRow(49).step);
    CHECK(RunLogReader::writerState(path) == WriterState::Live);
    writer.appendTrain(trainRow(50));
  }
  CHECK(RunLogReader::writerState(path) == WriterState::Closed);
  RunLogReader reader(path);
  REQUIRE(reader.trainRows() == 51);
  checkTrain(reader.readTrain(50, 51)[0], trainRow(50));
  CHECK(reader.evalRows() == 1);  // its step (100) is within the kept steps (<= 148)
  CHECK_THAT(reader.events().back(), Contains("(previous writer crashed)"));
}

TEST_CASE("a log held by a non-SWMR writer is refused, then readable once it dies", "[log][swmr]") {
  TempDir dir;
  const std::string path = dir.file("log.h5");
  {
    RunLogWriter writer = RunLogWriter::create(path, attributes(), RunLogSchema{});
    for (int64_t i = 0; i < 10; ++i) writer.appendTrain(trainRow(i));
  }
  Pipe toParent, toChild;
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    runChild([&] {
      // What create() and resume() look like before SWMR starts: a plain read-write open.
      const hid_t access = H5Pcreate(H5P_FILE_ACCESS);
      H5Pset_libver_bounds(access, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
      const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, access);
      if (file < 0) return 5;
      toParent.send('o');
      if (receive(toChild.fds[0], 10000) != 'x') return 6;
      ::_exit(0);  // dies holding the write flag
      return 1;
    });
  }
  ChildGuard child(pid);
  REQUIRE(receive(toParent.fds[0], 10000) == 'o');
  CHECK(RunLogReader::writerState(path) == WriterState::Live);
  requireError([&] { RunLogReader reader(path); }, "is another process writing it?");
  requireError([&] { RunLogWriter::resume(path, 5); }, "still writing");
  toChild.send('x');
  REQUIRE(child.wait(10000) == 0);

  CHECK(RunLogReader::writerState(path) == WriterState::Crashed);
  {
    RunLogReader reader(path);
    CHECK_FALSE(reader.isSwmr());  // no writer will come back: read without SWMR
    CHECK(reader.trainRows() == 10);
    CHECK_FALSE(reader.refresh());
    checkTrain(reader.readTrain(9, 10)[0], trainRow(9));
  }
  { RunLogWriter writer = RunLogWriter::resume(path, trainRow(4).step); }
  CHECK(RunLogReader::writerState(path) == WriterState::Closed);
  RunLogReader reader(path);
  CHECK(reader.isSwmr());
  CHECK(reader.trainRows() == 5);
}
