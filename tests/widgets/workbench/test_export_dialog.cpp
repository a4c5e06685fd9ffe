// The export dialog: reading a model folder (modules, defaults kept in BF16, the run's format),
// validation before start (missing folder, no config.json, a non-empty output without "replace",
// formats filtered by the run's quantization), the child's arguments, the accessibility lint, and
// the window's Export action. End to end ([.export-e2e], its own CTest entry): a tiny PTQ run
// exported to compressed-tensors-nvfp4 through the dialog with the real `fp4lab export` child
// (progress events, the summary, model.safetensors), and a cancelled export that leaves no OUT.
#include <catch2/catch.hpp>

#include <QAbstractButton>
#include <QAbstractItemView>
#include <QAbstractSpinBox>
#include <QAction>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMenu>
#include <QMenuBar>
#include <QProcess>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QTest>

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "fp4lab/widgets/export_dialog.h"
#include "fp4lab/widgets/main_window.h"
#include "workbench_fixtures.h"

using fp4lab::testing::TempDir;
using fp4lab::testing::waitFor;
using fp4lab::widgets::ExportDialog;

namespace {

QString qs(const std::string& s) {
  return QString::fromStdString(s);
}

QString program() {
  const char* bin = std::getenv("FP4LAB_BIN");
  return bin ? QString::fromUtf8(bin) : QString();
}

void writeFile(const QString& path, const QByteArray& bytes) {
  QDir().mkpath(QFileInfo(path).path());
  QFile f(path);
  REQUIRE(f.open(QIODevice::WriteOnly));
  f.write(bytes);
}

// A safetensors file whose header names `tensors` (name, JSON shape, bytes) as BF16, data zeros:
// the dialog reads headers only.
void writeHeaderOnlySafetensors(const QString& path,
                                const std::vector<std::tuple<QString, QString, qint64>>& tensors) {
  QByteArray header = "{\"__metadata__\":{\"format\":\"pt\"}";
  qint64 offset = 0;
  for (const auto& [name, shape, bytes] : tensors) {
    header += QStringLiteral(",\"%1\":{\"dtype\":\"BF16\",\"shape\":%2,\"data_offsets\":[%3,%4]}")
                  .arg(name, shape)
                  .arg(offset)
                  .arg(offset + bytes)
                  .toUtf8();
    offset += bytes;
  }
  header += '}';
  QByteArray file(8, '\0');
  quint64 n = quint64(header.size());
  for (int k = 0; k < 8; ++k) file[k] = char((n >> (8 * k)) & 0xff);
  file += header;
  file += QByteArray(offset, '\0');
  writeFile(path, file);
}

// A model folder with config.json and a safetensors file whose header names a tiny llama (the
// data is zeros: the dialog reads headers only). quantFormat "": a BF16 folder; "nvfp4"/"mxfp4":
// a run's model/ whose quant_state.json names every layer but layer 1's down_proj.
void writeModel(const QString& dir, const QString& quantFormat, bool withConfig = true) {
  QStringList names;
  for (int layer : {0, 1, 2, 10})
    for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                          "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"})
      names << QStringLiteral("model.layers.%1.%2").arg(layer).arg(QString::fromLatin1(m));
  std::vector<std::tuple<QString, QString, qint64>> tensors;
  auto tensor = [&](const QString& name, const QString& shape, qint64 bytes) {
    tensors.emplace_back(name, shape, bytes);
  };
  tensor(QStringLiteral("model.embed_tokens.weight"), QStringLiteral("[64,32]"), 64 * 32 * 2);
  for (const QString& n : names) tensor(n + QStringLiteral(".weight"), "[32,32]", 32 * 32 * 2);
  tensor(QStringLiteral("model.norm.weight"), QStringLiteral("[32]"), 64);
  tensor(QStringLiteral("lm_head.weight"), QStringLiteral("[64,32]"), 64 * 32 * 2);
  writeHeaderOnlySafetensors(dir + "/model.safetensors", tensors);
  if (withConfig)
    writeFile(dir + "/config.json",
              R"({"architectures":["LlamaForCausalLM"],"model_type":"llama"})");
  if (!quantFormat.isEmpty()) {
    QByteArray layers;
    for (const QString& l : names) {
      if (l == QLatin1String("model.layers.1.mlp.down_proj")) continue;
      layers += (layers.isEmpty() ? "" : ",") +
                QStringLiteral("\"%1\":{\"weight_amax\":1}").arg(l).toUtf8();
    }
    writeFile(dir + "/quant_state.json",
              QStringLiteral(R"({"format":"%1 W4A16, floor scales","layers":{%2}})")
                  .arg(quantFormat.toUpper(), QString::fromUtf8(layers))
                  .toUtf8());
  }
}

// A gpt-oss folder's header: attention and router linears, and per layer the two 3-D experts
// tensors with their biases.
void writeGptOssModel(const QString& dir) {
  std::vector<std::tuple<QString, QString, qint64>> tensors;
  auto tensor = [&](const QString& name, const QString& shape, qint64 bytes) {
    tensors.emplace_back(name, shape, bytes);
  };
  tensor(QStringLiteral("model.embed_tokens.weight"), QStringLiteral("[64,32]"), 64 * 32 * 2);
  for (int layer : {0, 1}) {
    const QString p = QStringLiteral("model.layers.%1.").arg(layer);
    for (const char* m :
         {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"})
      tensor(p + QString::fromLatin1(m) + ".weight", "[32,32]", 32 * 32 * 2);
    tensor(p + "self_attn.sinks", "[4]", 8);
    tensor(p + "mlp.router.weight", "[4,32]", 4 * 32 * 2);
    tensor(p + "mlp.router.bias", "[4]", 8);
    tensor(p + "mlp.experts.gate_up_proj", "[4,32,64]", 4 * 32 * 64 * 2);
    tensor(p + "mlp.experts.gate_up_proj_bias", "[4,64]", 4 * 64 * 2);
    tensor(p + "mlp.experts.down_proj", "[4,32,32]", 4 * 32 * 32 * 2);
    tensor(p + "mlp.experts.down_proj_bias", "[4,32]", 4 * 32 * 2);
  }
  tensor(QStringLiteral("lm_head.weight"), QStringLiteral("[64,32]"), 64 * 32 * 2);
  writeHeaderOnlySafetensors(dir + "/model.safetensors", tensors);
  writeFile(dir + "/config.json",
            R"({"architectures":["GptOssForCausalLM"],"model_type":"gpt_oss"})");
}

// A dialog with its formats loaded from the real child.
void waitForFormats(ExportDialog& d) {
  REQUIRE(waitFor([&] { return d.formatsLoaded(); }, 30000));
  d.validateNow();
}

QPushButton* button(ExportDialog& d, const char* name) {
  auto* b = d.findChild<QPushButton*>(QString::fromLatin1(name));
  REQUIRE(b);
  return b;
}

}  // namespace

TEST_CASE("export dialog: globs match as the exporter's --exclude", "[export]") {
  CHECK(ExportDialog::globMatch("*.0.*", "model.layers.0.mlp.up_proj"));
  CHECK_FALSE(ExportDialog::globMatch("*.0.*", "model.layers.10.mlp.up_proj"));
  CHECK(ExportDialog::globMatch("*down_proj", "model.layers.3.mlp.down_proj"));
  CHECK(ExportDialog::globMatch("model.layers.?.mlp.*", "model.layers.7.mlp.gate_proj"));
  CHECK(ExportDialog::globMatch("*.[0-2].*", "model.layers.2.mlp.gate_proj"));
  CHECK_FALSE(ExportDialog::globMatch("*.[!0-2].*", "model.layers.2.mlp.gate_proj"));
  CHECK(ExportDialog::globMatch("lm_head", "lm_head"));
  CHECK_FALSE(ExportDialog::globMatch("lm_head", "lm_head2"));
  CHECK(ExportDialog::globMatch("*", ""));
}

TEST_CASE("export dialog: a model folder's modules, defaults and format", "[export]") {
  TempDir tmp;
  const QString run = qs(tmp.file("run")), bf16 = qs(tmp.file("bf16"));
  writeModel(run + "/model", "mxfp4");
  writeModel(bf16, "");
  const ExportDialog::ModelInfo info = ExportDialog::inspectModel(run + "/model");
  CHECK(info.exists);
  CHECK(info.hasConfig);
  CHECK(info.hasWeights);
  CHECK(info.quantFormat == "mxfp4");
  CHECK(info.scaleRule == "floor");
  // lm_head first, then model order (layer 10 after layer 2); no embeddings, no norms.
  REQUIRE(info.linearModules.size() == 29);
  CHECK(info.linearModules.front() == "lm_head");
  CHECK(info.linearModules.indexOf("model.layers.10.mlp.up_proj") >
        info.linearModules.indexOf("model.layers.2.mlp.up_proj"));
  CHECK_FALSE(info.linearModules.contains("model.embed_tokens"));
  CHECK_FALSE(info.linearModules.contains("model.norm"));
  CHECK(info.keptByDefault == QStringList({"lm_head", "model.layers.1.mlp.down_proj"}));
  // A BF16 folder: the recipes' defaults (model.layers.*, not lm_head).
  const ExportDialog::ModelInfo plain = ExportDialog::inspectModel(bf16);
  CHECK(plain.quantFormat.isEmpty());
  CHECK(plain.keptByDefault == QStringList({"lm_head"}));
  // A run folder's model/, else its latest checkpoint.
  CHECK(ExportDialog::modelDirOfRun(run) == run + "/model");
  writeModel(run + "/checkpoints/step-5", "mxfp4");
  CHECK(ExportDialog::modelDirOfRun(qs(tmp.file("none")), run + "/checkpoints/step-5") ==
        run + "/checkpoints/step-5");
  CHECK(ExportDialog::modelDirOfRun(qs(tmp.file("none"))).isEmpty());
}

TEST_CASE("export dialog: gpt-oss, its experts and its layout", "[export]") {
  if (program().isEmpty()) FAIL("FP4LAB_BIN is not set (CTest sets it to the fp4lab executable)");
  TempDir tmp;
  const QString dir = qs(tmp.file("gpt-oss"));
  writeGptOssModel(dir);
  const ExportDialog::ModelInfo info = ExportDialog::inspectModel(dir);
  CHECK(info.gptOss);
  // The experts tensors are the quantized layers; attention, routers and lm_head stay BF16.
  CHECK(info.linearModules.contains("model.layers.1.mlp.experts.gate_up_proj"));
  CHECK(info.linearModules.contains("model.layers.0.mlp.experts.down_proj"));
  CHECK_FALSE(info.linearModules.contains("model.layers.0.mlp.experts.down_proj_bias"));
  CHECK(info.keptByDefault.contains("model.layers.0.self_attn.q_proj"));
  CHECK(info.keptByDefault.contains("model.layers.1.mlp.router"));
  CHECK(info.keptByDefault.contains("lm_head"));
  for (const QString& m : info.keptByDefault) CHECK_FALSE(m.contains(".experts."));
  ExportDialog d(program());
  waitForFormats(d);
  d.setModelDir(dir);
  CHECK(d.offeredFormats() == QStringList({"gpt-oss-mxfp4", "bf16"}));
  CHECK(d.format() == "gpt-oss-mxfp4");
}

TEST_CASE("export dialog: validation before start", "[export]") {
  if (program().isEmpty()) FAIL("FP4LAB_BIN is not set (CTest sets it to the fp4lab executable)");
  TempDir tmp;
  const QString root = qs(tmp.path.string());
  writeModel(root + "/nv/model", "nvfp4");
  writeModel(root + "/mx/model", "mxfp4");
  writeModel(root + "/bf16", "");
  writeModel(root + "/noconfig", "", false);
  ExportDialog d(program());
  waitForFormats(d);
  QPushButton* exportButton = button(d, "export");

  SECTION("no checkpoint, a missing folder, a folder without config.json") {
    CHECK_FALSE(d.isValid());
    CHECK_FALSE(exportButton->isEnabled());
    d.setModelDir(root + "/missing");
    CHECK_FALSE(d.isValid());
    CHECK(d.errorText().contains("does not exist"));
    CHECK_FALSE(exportButton->isEnabled());
    d.setModelDir(root + "/noconfig");
    CHECK_FALSE(d.isValid());
    CHECK(d.errorText().contains("config.json"));
    // Made valid: the error goes and Export is enabled.
    d.setModelDir(root + "/bf16");
    INFO(d.errorText().toStdString());
    CHECK(d.isValid());
    CHECK(exportButton->isEnabled());
    CHECK(d.findChild<QLabel*>("error")->isHidden());
    CHECK(d.outputDir() == root + "/bf16-" + d.format());
  }

  SECTION("a non-empty output folder needs 'replace' (--force)") {
    d.setModelDir(root + "/nv/model");
    writeFile(root + "/busy/file.txt", "x");
    d.setOutputDir(root + "/busy");
    CHECK_FALSE(d.isValid());
    CHECK(d.errorText().contains("not empty"));
    auto* replace = d.findChild<QAbstractButton*>("replace output");
    REQUIRE(replace);
    CHECK(replace->isVisibleTo(&d));
    CHECK_FALSE(d.arguments().contains("--force"));
    QTest::mouseClick(replace, Qt::LeftButton);
    d.validateNow();
    CHECK(d.isValid());
    CHECK(d.arguments().contains("--force"));
    // An empty or missing folder needs nothing.
    d.setOutputDir(root + "/fresh");
    CHECK(d.isValid());
    CHECK_FALSE(replace->isVisibleTo(&d));
    CHECK_FALSE(d.arguments().contains("--force"));
    // Never the checkpoint itself.
    d.setOutputDir(root + "/nv");
    CHECK_FALSE(d.isValid());
  }

  SECTION("formats filtered by the run's quantization") {
    d.setModelDir(root + "/nv/model");
    CHECK(d.offeredFormats() ==
          QStringList({"modelopt-nvfp4", "compressed-tensors-nvfp4", "bf16"}));
    CHECK(d.format() == "compressed-tensors-nvfp4");
    CHECK_FALSE(d.setFormat("compressed-tensors-mxfp4"));
    auto* scale = d.findChild<QComboBox*>("scale rule");
    REQUIRE(scale);
    CHECK_FALSE(scale->isVisibleTo(&d));  // NVFP4: no scale rule
    d.setModelDir(root + "/mx/model");
    CHECK(d.offeredFormats() == QStringList({"compressed-tensors-mxfp4", "bf16"}));
    CHECK(d.format() == "compressed-tensors-mxfp4");
    CHECK(scale->isVisibleTo(&d));
    CHECK_FALSE(scale->isEnabled());  // the run's rule
    CHECK(scale->currentText() == "floor");
    CHECK_FALSE(d.arguments().contains("--scale-rule"));  // the exporter uses the run's
    // A BF16 folder: every format but gpt-oss's (a llama), with a scale rule to choose.
    d.setModelDir(root + "/bf16");
    CHECK(d.offeredFormats() == QStringList({"modelopt-nvfp4", "compressed-tensors-nvfp4",
                                             "compressed-tensors-mxfp4", "bf16"}));
    REQUIRE(d.setFormat("compressed-tensors-mxfp4"));
    CHECK(scale->isEnabled());
    scale->setCurrentText("floor");
    CHECK(d.arguments().join(' ').contains("--scale-rule floor"));
    // Every format has its one line of who loads it.
    auto* description = d.findChild<QLabel*>("format description");
    REQUIRE(description);
    CHECK(description->text().contains("vLLM"));
  }

  SECTION("modules kept in BF16: defaults fixed, more checked or matched by globs") {
    d.setModelDir(root + "/nv/model");
    auto* list = d.findChild<QListWidget*>("modules kept in bf16");
    REQUIRE(list);
    REQUIRE(list->count() == 29);
    CHECK(list->item(0)->text() == "lm_head");
    CHECK(list->item(0)->checkState() == Qt::Checked);
    CHECK_FALSE(list->item(0)->flags() & Qt::ItemIsUserCheckable);
    CHECK_FALSE(d.setModuleKept("lm_head", false));
    REQUIRE(d.setModuleKept("model.layers.0.mlp.down_proj", true));
    d.setGlobs("*.10.*, *o_proj");
    const QStringList args = d.arguments();
    CHECK(args.join(' ').contains("--exclude model.layers.0.mlp.down_proj"));
    CHECK(args.join(' ').contains("--exclude *.10.* --exclude *o_proj"));
    CHECK(args.mid(args.size() - 2) == QStringList({"--events", "jsonl"}));
    CHECK(args.mid(0, 4) ==
          QStringList({"export", root + "/nv/model", "--format", "compressed-tensors-nvfp4"}));
    CHECK(d.isValid());
    // Keeping everything leaves nothing to quantize.
    d.setGlobs("*");
    CHECK_FALSE(d.isValid());
    CHECK(d.errorText().contains("nothing is left to quantize"));
    REQUIRE(d.setFormat("bf16"));
    CHECK(d.isValid());
    CHECK_FALSE(d.arguments().contains("--exclude"));
  }
}

TEST_CASE("export dialog: accessibility lint, buddies", "[export][a11y]") {
  TempDir tmp;
  writeModel(qs(tmp.file("bf16")), "");
  ExportDialog d(program().isEmpty() ? QStringLiteral("/bin/false") : program());
  if (!program().isEmpty()) waitForFormats(d);
  d.setModelDir(qs(tmp.file("bf16")));
  writeFile(qs(tmp.file("busy/x")), "x");
  d.setOutputDir(qs(tmp.file("busy")));  // the replace checkbox shows
  d.show();
  REQUIRE(QTest::qWaitForWindowExposed(&d));
  int checked = 0;
  for (QWidget* w : d.findChildren<QWidget*>()) {
    const bool interactive = qobject_cast<QAbstractButton*>(w) || qobject_cast<QLineEdit*>(w) ||
                             qobject_cast<QComboBox*>(w) || qobject_cast<QAbstractSpinBox*>(w) ||
                             qobject_cast<QAbstractItemView*>(w);
    if (!interactive || !w->isVisibleTo(&d)) continue;
    if (w->objectName().startsWith(QLatin1String("qt_")) ||
        qobject_cast<const QLineEdit*>(w->parentWidget()) ||
        qobject_cast<const QComboBox*>(w->parentWidget()))
      continue;
    ++checked;
    INFO(w->metaObject()->className() << " '" << w->objectName().toStdString() << "'");
    CHECK_FALSE(w->accessibleName().isEmpty());
    CHECK_FALSE(w->toolTip().isEmpty());
    CHECK_FALSE(w->objectName().isEmpty());
  }
  CHECK(checked >= 9);
  // Every field of the form has a buddy label.
  auto* form = d.findChild<QFormLayout*>();
  REQUIRE(form);
  for (const char* name : {"checkpoint", "format", "modules kept in bf16", "keep globs",
                           "scale rule", "output folder"}) {
    auto* field = d.findChild<QWidget*>(QString::fromLatin1(name));
    REQUIRE(field);
    bool hasBuddy = false;
    for (QLabel* l : d.findChildren<QLabel*>())
      if (l->buddy() == field) hasBuddy = true;
    INFO(name);
    CHECK(hasBuddy);
  }
  // Value labels are described, never named (the name would replace their text).
  for (const char* name : {"error", "summary", "status", "format description"}) {
    auto* l = d.findChild<QLabel*>(QString::fromLatin1(name));
    REQUIRE(l);
    CHECK(l->accessibleName().isEmpty());
    CHECK_FALSE(l->accessibleDescription().isEmpty());
  }
}

TEST_CASE("the window's Export action: File menu, Ctrl+E, enabled with no selection", "[export]") {
  TempDir tmp;
  fp4lab::widgets::WorkbenchOptions options;
  options.roots = {qs(tmp.file("runs"))};
  options.program = QStringLiteral("/bin/false");
  fp4lab::widgets::MainWindow w(options);
  QAction* a = w.action("export");
  REQUIRE(a);
  CHECK(a->shortcut() == QKeySequence(Qt::CTRL | Qt::Key_E));
  CHECK(a->isEnabled());
  CHECK_FALSE(a->toolTip().isEmpty());
  bool inFile = false;
  for (QAction* menu : w.menuBar()->actions())
    if (menu->menu() && menu->text() == "&File") inFile = menu->menu()->actions().contains(a);
  CHECK(inFile);
}

// ---- End to end, with the real child ------------------------------------------------------------

namespace {

// A tiny PTQ NVFP4 run, made by `fp4lab train` (about 20 s).
QString makePtqRun(const QString& dir) {
  QProcess p;
  p.setProcessChannelMode(QProcess::MergedChannels);
  p.start(program(),
          {"train", "--defaults", "recipe.name=ptq", "quant.format=nvfp4",
           "model.path=builtin:tiny", "data.seq_len=64", "train.batch_size=4", "train.threads=1",
           "quant.calib_batches=1", "data.validation_max=8", "--output-dir", dir});
  REQUIRE(p.waitForStarted(10000));
  const bool done = p.waitForFinished(300000);
  INFO(QString::fromUtf8(p.readAll()).toStdString());
  REQUIRE(done);
  REQUIRE(p.exitCode() == 0);
  const QString model = ExportDialog::modelDirOfRun(dir);
  REQUIRE_FALSE(model.isEmpty());
  return model;
}

void grab(QWidget& w, const QString& path) {
  QApplication::processEvents();
  w.grab().save(path);
}

}  // namespace

TEST_CASE("export dialog end to end: a PTQ run to compressed-tensors-nvfp4; a cancelled export",
          "[.export-e2e]") {
  REQUIRE_FALSE(program().isEmpty());  // CTest sets FP4LAB_BIN
  TempDir tmp;
  const QString root = qs(tmp.path.string());
  const QString model = makePtqRun(root + "/ptq");
  ExportDialog d(program());
  d.resize(720, 640);
  d.show();
  REQUIRE(QTest::qWaitForWindowExposed(&d));
  waitForFormats(d);
  d.setModelDir(model);
  REQUIRE(d.setFormat("compressed-tensors-nvfp4"));
  const QString out = root + "/out";
  d.setOutputDir(out);
  INFO(d.errorText().toStdString());
  REQUIRE(d.isValid());
  grab(d, "/tmp/export_dialog_ready.png");

  QSignalSpy progressed(&d, &ExportDialog::progressed);
  QSignalSpy ended(&d, &ExportDialog::exportEnded);
  QPushButton* exportButton = button(d, "export");
  QTest::mouseClick(exportButton, Qt::LeftButton);
  CHECK(d.state() == ExportDialog::State::Running);
  CHECK_FALSE(exportButton->isEnabled());
  CHECK(button(d, "cancel export")->isVisible());
  REQUIRE(ended.wait(120000));
  INFO(d.statusText().toStdString());
  REQUIRE(d.state() == ExportDialog::State::Finished);
  CHECK(progressed.count() > 10);
  CHECK(d.progressEvents() == progressed.count());
  CHECK(d.progressValue() == d.progressMaximum());
  CHECK(d.findChild<QProgressBar*>("export progress")->isHidden());
  const QString summary = d.summaryText();
  CHECK(summary.contains("Tensors written: "));
  CHECK(summary.contains("compression"));
  CHECK(summary.contains("Max dequantization error"));
  CHECK(d.findChild<QLabel*>("summary")->isVisible());
  CHECK(button(d, "open folder")->isVisible());
  CHECK(QFileInfo(out + "/model.safetensors").isFile());
  CHECK(QFileInfo(out + "/config.json").isFile());
  // Beside the summary of what was written, no offer to replace it.
  CHECK_FALSE(d.findChild<QCheckBox*>("replace output")->isVisible());
  grab(d, "/tmp/export_dialog.png");
  d.resize(d.minimumWidth(), 300);
  QTest::qWait(50);
  INFO("dialog " << d.width() << "x" << d.height() << " min " << d.minimumSize().height()
                 << " hint " << d.minimumSizeHint().height() << " hfw "
                 << d.layout()->totalHeightForWidth(d.width()));
  // Made small, the dialog keeps what its form needs: the module list keeps its rows, nothing
  // overlaps it.
  auto* modules = d.findChild<QWidget*>("modules kept in bf16");
  auto* globs = d.findChild<QWidget*>("keep globs");
  REQUIRE(modules);
  REQUIRE(globs);
  CHECK(modules->height() >= modules->fontMetrics().lineSpacing() * 7);
  CHECK(modules->mapTo(&d, QPoint(0, modules->height())).y() <= globs->mapTo(&d, QPoint(0, 0)).y());
  grab(d, "/tmp/export_dialog_small.png");
  d.resize(720, 640);

  // The same folder again: it is not empty now, so "replace" is needed.
  CHECK_FALSE(d.isValid());
  CHECK(d.errorText().contains("not empty"));
  grab(d, "/tmp/export_dialog_invalid.png");

  // Cancelled at the first progress event: SIGTERM, the exporter stops, no OUT, no leftovers.
  const QString cancelled = root + "/cancelled";
  d.setOutputDir(cancelled);
  REQUIRE(d.isValid());
  bool once = false;
  QObject::connect(&d, &ExportDialog::progressed, &d, [&] {
    if (!once) once = true, d.cancel();
  });
  ended.clear();
  REQUIRE(d.start());
  REQUIRE(ended.wait(120000));
  INFO(d.statusText().toStdString());
  CHECK(once);
  CHECK(d.state() == ExportDialog::State::Cancelled);
  CHECK(d.statusText().contains("cancelled"));
  CHECK_FALSE(QFileInfo::exists(cancelled));
  for (const QString& entry : QDir(root).entryList(QDir::AllEntries | QDir::NoDotAndDotDot))
    CHECK_FALSE(entry.contains("cancelled"));
  // The fields are editable again, and the export can be started again.
  CHECK(d.isValid());
  CHECK(button(d, "export")->isEnabled());
}

// Hidden: the export dialog on a gpt-oss model, at its natural size and at a small one, saved as
// PNGs into $FP4LAB_SCREENSHOT_OUT (run under Xvfb with the xcb platform to look at them).
TEST_CASE("export dialog screenshots: a gpt-oss model", "[.screenshots-export]") {
  if (program().isEmpty()) FAIL("FP4LAB_BIN is not set");
  const char* out = std::getenv("FP4LAB_SCREENSHOT_OUT");
  if (!out || !*out) FAIL("FP4LAB_SCREENSHOT_OUT is not set");
  TempDir tmp;
  const QString dir = qs(tmp.file("gpt-oss-20b-qat"));
  writeGptOssModel(dir);
  ExportDialog d(program());
  waitForFormats(d);
  d.setModelDir(dir);
  d.show();
  for (const auto& [name, size] : {std::pair{"export-gpt-oss.png", d.sizeHint()},
                                   std::pair{"export-gpt-oss-small.png", QSize(420, 360)}}) {
    d.resize(size);
    QTest::qWait(200);
    REQUIRE(d.grab().save(QDir(QString::fromLocal8Bit(out)).filePath(QString::fromLatin1(name))));
  }
}
