// The New run dialog: a field per key of the engine's table, recipe/format-dependent fields,
// errors from the engine's own validation next to the field they name, and run.yaml open/save.
#include <catch2/catch.hpp>

#include <QAccessible>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QTextDocumentFragment>
#include <QToolButton>

#include <cstdlib>
#include <functional>
#include <set>
#include <string>

#include "fp4lab/error.h"
#include "fp4lab/run/config_keys.h"
#include "fp4lab/run/run_config.h"
#include "fp4lab/widgets/config_form.h"
#include "fp4lab/widgets/new_run_dialog.h"
#include "workbench_fixtures.h"

using fp4lab::run::ConfigKey;
using fp4lab::run::KeyType;
using fp4lab::run::RunConfig;
using fp4lab::run::runConfigKeys;
using fp4lab::widgets::ConfigForm;
using fp4lab::widgets::NewRunDialog;

namespace {

QString qs(const std::string& s) {
  return QString::fromStdString(s);
}

QWidget* fieldOf(NewRunDialog& d, const char* key) {
  auto* w = d.findChild<QWidget*>(QString::fromLatin1(key));
  REQUIRE(w != nullptr);
  return w;
}

QPushButton* button(NewRunDialog& d, const char* name) {
  auto* b = d.findChild<QPushButton*>(QString::fromLatin1(name));
  REQUIRE(b != nullptr);
  return b;
}

// The error label under a field, found by walking up from the field to its row.
QLabel* errorLabelOf(NewRunDialog& d, const char* key) {
  auto* label = d.findChild<QLabel*>(QStringLiteral("error %1").arg(QString::fromLatin1(key)));
  REQUIRE(label != nullptr);
  // It must sit in the same row as the field (its cell), i.e. next to it.
  REQUIRE(label->parentWidget() == fieldOf(d, key)->parentWidget());
  return label;
}

// Types `text` into a line edit as a user does (select all, type), then waits for the debounced
// validation.
void typeInto(NewRunDialog& d, const char* key, const QString& text) {
  auto* edit = qobject_cast<QLineEdit*>(fieldOf(d, key));
  REQUIRE(edit != nullptr);
  QSignalSpy spy(&d, &NewRunDialog::validated);
  edit->setFocus();
  edit->selectAll();
  QTest::keyClick(edit, Qt::Key_Delete);
  QTest::keyClicks(edit, text);
  REQUIRE(spy.wait(3000));
}

void choose(NewRunDialog& d, const char* key, const char* choice) {
  auto* combo = qobject_cast<QComboBox*>(fieldOf(d, key));
  REQUIRE(combo != nullptr);
  const int index = combo->findText(QString::fromLatin1(choice));
  REQUIRE(index >= 0);
  if (combo->currentIndex() == index) return;
  QSignalSpy spy(&d, &NewRunDialog::validated);
  combo->setCurrentIndex(index);
  REQUIRE(spy.wait(3000));
}

bool shown(NewRunDialog& d, const char* key) {
  return fieldOf(d, key)->isVisibleTo(&d);
}

QByteArray readAll(const QString& path) {
  QFile f(path);
  REQUIRE(f.open(QIODevice::ReadOnly));
  return f.readAll();
}

void writeAll(const QString& path, const QByteArray& bytes) {
  QFile f(path);
  REQUIRE(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
  REQUIRE(f.write(bytes) == bytes.size());
}

// A configuration away from the defaults in many keys, all of which apply to it (QAD, NVFP4).
RunConfig sampleConfig() {
  RunConfig c;
  c.name = "a: b # c";  // needs quoting in YAML
  c.seed = 18446744073709551615ULL;
  c.modelPath = "runs/sft/model";
  c.computeDtype = "fp32";
  c.pack = false;
  c.validationFraction = 0.2;
  c.recipe = "qad";
  c.teacher = "runs/sft/model";
  c.temperature = 2.5;
  c.ceWeight = 0.1;
  c.quantFormat = "nvfp4";
  c.blocks2d = true;
  c.quantActivations = false;
  c.quantBackward = "clipped_ste";
  c.lr = 3e-4;
  c.beta2 = 0.999;
  c.maxSteps = 0;
  c.tasks = "reasoning_language, false_refusal";
  return c;
}

}  // namespace

TEST_CASE("the form has one named, described field per key of the engine's table",
          "[new-run-dialog]") {
  NewRunDialog d;
  const auto& keys = runConfigKeys();
  REQUIRE(keys.size() > 30);

  std::set<QString> names;
  for (const ConfigKey& key : keys) names.insert(qs(key.name));
  // Every widget whose accessible name is a key name: exactly one per key.
  std::multiset<QString> fields;
  for (QWidget* w : d.findChildren<QWidget*>())
    if (names.count(w->accessibleName())) fields.insert(w->accessibleName());
  CHECK(fields.size() == keys.size());
  CHECK(std::set<QString>(fields.begin(), fields.end()) == names);

  for (const ConfigKey& key : keys) {
    INFO(key.name);
    QWidget* field = fieldOf(d, key.name.c_str());
    CHECK(field->accessibleName() == qs(key.name));
    switch (key.type) {
      case KeyType::Choice: {
        auto* combo = qobject_cast<QComboBox*>(field);
        REQUIRE(combo != nullptr);
        QStringList items;
        for (int i = 0; i < combo->count(); ++i) items << combo->itemText(i);
        QStringList choices;
        for (const auto& c : key.choices) choices << qs(c);
        CHECK(items == choices);
        break;
      }
      case KeyType::Boolean:
        CHECK(qobject_cast<QCheckBox*>(field) != nullptr);
        break;
      default:
        CHECK(qobject_cast<QLineEdit*>(field) != nullptr);
    }
    // The tooltip carries the key's help and its type.
    const QString tip = QTextDocumentFragment::fromHtml(field->toolTip()).toPlainText();
    CHECK(tip.contains(qs(key.help)));
    CHECK(tip.contains(qs(key.typeDescription())));
    // A label naming the key is its buddy (combo boxes are announced through it).
    auto* label = d.findChild<QLabel*>(QStringLiteral("label %1").arg(qs(key.name)));
    REQUIRE(label != nullptr);
    CHECK(label->text() == qs(key.name));
    CHECK(label->buddy() == field);
    // Nothing is changed from the defaults yet.
    CHECK_FALSE(label->font().bold());
    CHECK(field->isVisibleTo(&d) == NewRunDialog::keyApplies(qs(key.name), "sft", "none"));
  }
  // A few fields shown with their defaults, spelled out independently.
  CHECK(qobject_cast<QLineEdit*>(fieldOf(d, "optim.lr"))->text() == "0.001");
  CHECK(qobject_cast<QLineEdit*>(fieldOf(d, "data.validation_fraction"))->text() == "0.05");
  CHECK(qobject_cast<QLineEdit*>(fieldOf(d, "data.train"))->text() == "builtin:sft");
  CHECK(qobject_cast<QLineEdit*>(fieldOf(d, "data.validation"))->text() == "");
  CHECK(qobject_cast<QLineEdit*>(fieldOf(d, "quant.exclude"))->text() ==
        "*lm_head*,*embed*,*router*,*.gate");
  CHECK(qobject_cast<QCheckBox*>(fieldOf(d, "data.pack"))->isChecked());
  CHECK(qobject_cast<QComboBox*>(fieldOf(d, "recipe.name"))->currentText() == "sft");

  // The buttons, by accessible name; the defaults are valid, so Queue run is enabled.
  for (const char* name : {"open config", "save config", "queue run", "cancel"})
    CHECK(button(d, name)->accessibleName() == QString::fromLatin1(name));
  CHECK(button(d, "queue run")->isDefault());
  CHECK(button(d, "queue run")->isEnabled());
  CHECK(d.errorText().isEmpty());
  CHECK(d.config().toYaml() == RunConfig().toYaml());

  // Accessibility lint: every interactive widget has a name (line edits' own clear buttons
  // aside).
  for (QWidget* w : d.findChildren<QWidget*>()) {
    if (!(qobject_cast<QAbstractButton*>(w) || qobject_cast<QLineEdit*>(w) ||
          qobject_cast<QComboBox*>(w)))
      continue;
    if (qobject_cast<QLineEdit*>(w->parentWidget())) continue;
    INFO(w->metaObject()->className() << " " << w->objectName().toStdString());
    CHECK_FALSE(w->accessibleName().isEmpty());
  }
}

TEST_CASE("paths offer Browse… with the built-ins their help names", "[new-run-dialog]") {
  NewRunDialog d;
  auto menuTexts = [&](const char* key) {
    auto* b = d.findChild<QToolButton*>(QStringLiteral("browse %1").arg(QString::fromLatin1(key)));
    REQUIRE(b != nullptr);
    CHECK(b->accessibleName() == QStringLiteral("browse %1").arg(QString::fromLatin1(key)));
    REQUIRE(b->menu() != nullptr);
    QStringList texts;
    for (QAction* a : b->menu()->actions()) texts << a->text();
    return texts;
  };
  for (const ConfigKey& key : runConfigKeys()) {
    const bool hasButton =
        d.findChild<QToolButton*>(QStringLiteral("browse %1").arg(qs(key.name))) != nullptr;
    INFO(key.name);
    CHECK(hasButton == key.isPath);
  }
  const QStringList model = menuTexts("model.path");
  CHECK(model.contains("builtin:tiny"));
  CHECK(model.contains("scratch:tiny"));
  const QStringList data = menuTexts("data.train");
  CHECK(data.contains("builtin:sft"));
  CHECK(data.contains("builtin:pretrain"));
  CHECK(data.contains("random:tokens"));

  // Picking a built-in sets the field as if typed.
  auto* b = d.findChild<QToolButton*>(QStringLiteral("browse data.train"));
  QAction* pretrain = nullptr;
  for (QAction* a : b->menu()->actions())
    if (a->text() == "builtin:pretrain") pretrain = a;
  REQUIRE(pretrain != nullptr);
  QSignalSpy spy(&d, &NewRunDialog::validated);
  pretrain->trigger();
  REQUIRE(spy.wait(3000));
  CHECK(qobject_cast<QLineEdit*>(fieldOf(d, "data.train"))->text() == "builtin:pretrain");
  CHECK(d.config().trainData == "builtin:pretrain");
}

TEST_CASE("the recipe and format pickers show only the fields that apply", "[new-run-dialog]") {
  NewRunDialog d;
  d.show();
  REQUIRE(QTest::qWaitForWindowExposed(&d));

  // sft: no quantization, no distillation.
  for (const ConfigKey& key : runConfigKeys())
    if (key.name.rfind("quant.", 0) == 0) CHECK_FALSE(shown(d, key.name.c_str()));
  CHECK_FALSE(shown(d, "recipe.teacher"));
  CHECK(shown(d, "optim.lr"));
  CHECK(shown(d, "recipe.name"));

  choose(d, "recipe.name", "qat");
  CHECK(shown(d, "quant.format"));
  CHECK(shown(d, "quant.activations"));
  CHECK(shown(d, "quant.calib_batches"));
  CHECK_FALSE(shown(d, "recipe.teacher"));
  CHECK_FALSE(shown(d, "recipe.temperature"));

  choose(d, "quant.format", "mxfp4");
  CHECK(shown(d, "quant.scale_rule"));
  CHECK_FALSE(shown(d, "quant.blocks_2d"));
  choose(d, "quant.format", "nvfp4");
  CHECK_FALSE(shown(d, "quant.scale_rule"));
  CHECK(shown(d, "quant.blocks_2d"));

  choose(d, "recipe.name", "qad");
  CHECK(shown(d, "recipe.teacher"));
  CHECK(shown(d, "recipe.temperature"));
  CHECK(shown(d, "recipe.ce_weight"));
  CHECK(d.isValid());

  // A hidden field keeps its text but the configuration gets the key's default.
  choose(d, "quant.format", "mxfp4");
  choose(d, "quant.scale_rule", "floor");
  CHECK(d.config().scaleRule == "floor");
  choose(d, "quant.format", "nvfp4");
  CHECK_FALSE(shown(d, "quant.scale_rule"));
  CHECK(d.config().scaleRule == "ceil");
  CHECK(d.config().quantFormat == "nvfp4");

  choose(d, "recipe.name", "sft");
  CHECK_FALSE(shown(d, "quant.format"));
  CHECK_FALSE(shown(d, "recipe.teacher"));
  // quant.format says nvfp4 in its hidden field, but sft gets none (which it requires).
  CHECK(d.isValid());
  CHECK(d.config().quantFormat == "none");
}

TEST_CASE("a bad value shows the engine's message next to its field and disables Queue",
          "[new-run-dialog]") {
  NewRunDialog d;
  d.show();
  REQUIRE(QTest::qWaitForWindowExposed(&d));
  QPushButton* queue = button(d, "queue run");
  auto* lrLabel = d.findChild<QLabel*>(QStringLiteral("label optim.lr"));
  REQUIRE(lrLabel != nullptr);

  typeInto(d, "optim.lr", "abc");
  CHECK_FALSE(d.isValid());
  CHECK_FALSE(queue->isEnabled());
  CHECK(d.errorKey() == "optim.lr");
  QLabel* lrError = errorLabelOf(d, "optim.lr");
  CHECK(lrError->isVisibleTo(&d));
  CHECK(lrError->text().contains("optim.lr"));
  CHECK(lrError->text().contains("must be a number"));
  CHECK(lrError->text().contains("abc"));
  CHECK(d.errorText().contains("optim.lr"));
  CHECK(lrLabel->font().bold());  // changed from the default
  CHECK_THROWS_AS(d.config(), fp4lab::Error);
  // The dialog refuses to accept.
  d.accept();
  CHECK(d.isVisible());
  CHECK(d.result() != QDialog::Accepted);

  typeInto(d, "optim.lr", "5e-4");
  CHECK(d.isValid());
  CHECK(queue->isEnabled());
  CHECK_FALSE(lrError->isVisibleTo(&d));
  CHECK(d.errorText().isEmpty());
  CHECK(d.config().lr == Approx(5e-4));
  CHECK(lrLabel->font().bold());

  // An integer out of its bounds (train.batch_size is at least 1).
  typeInto(d, "train.batch_size", "0");
  CHECK(d.errorKey() == "train.batch_size");
  CHECK(errorLabelOf(d, "train.batch_size")->isVisibleTo(&d));
  CHECK(errorLabelOf(d, "train.batch_size")->text().contains("in [1, 65536]"));
  CHECK_FALSE(queue->isEnabled());
  typeInto(d, "train.batch_size", "16");
  CHECK(queue->isEnabled());

  // The GUI adds no rules of its own: train.max_steps=0 (evaluate and save only) is fine.
  typeInto(d, "train.max_steps", "0");
  CHECK(d.isValid());
  CHECK(d.config().maxSteps == 0);

  // Back to the default value: the label is no longer marked.
  typeInto(d, "optim.lr", "0.001");
  CHECK_FALSE(lrLabel->font().bold());
  CHECK(d.config().toYaml() ==
        RunConfig::fromYamlText("", {"train.batch_size=16", "train.max_steps=0"}).toYaml());
}

TEST_CASE("a cross-key error is shown at the field validate() names", "[new-run-dialog]") {
  NewRunDialog d;
  d.show();
  REQUIRE(QTest::qWaitForWindowExposed(&d));
  // qat needs a format; quant.format is still none.
  choose(d, "recipe.name", "qat");
  CHECK_FALSE(d.isValid());
  CHECK_FALSE(button(d, "queue run")->isEnabled());
  CHECK(d.errorKey() == "quant.format");
  QLabel* error = errorLabelOf(d, "quant.format");
  CHECK(error->isVisibleTo(&d));
  CHECK(error->text().contains("quant.format"));
  CHECK(error->text().contains("qat"));
  CHECK_FALSE(errorLabelOf(d, "recipe.name")->isVisibleTo(&d));
  // The same message as the engine gives the same configuration.
  std::string engine;
  try {
    RunConfig::fromYamlText("", {"recipe.name=qat"});
  } catch (const fp4lab::Error& e) {
    engine = e.problem();
  }
  REQUIRE_FALSE(engine.empty());
  CHECK(d.errorText().contains(qs(engine)));
  d.accept();
  CHECK(d.result() != QDialog::Accepted);

  choose(d, "quant.format", "mxfp4");
  CHECK(d.isValid());
  CHECK_FALSE(error->isVisibleTo(&d));
  // With a frozen amax, calibration needs batches.
  typeInto(d, "quant.calib_batches", "0");
  CHECK(d.errorKey() == "quant.calib_batches");
  CHECK(errorLabelOf(d, "quant.calib_batches")->isVisibleTo(&d));
  choose(d, "quant.amax", "dynamic");
  CHECK(d.isValid());

  QSignalSpy accepted(&d, &QDialog::accepted);
  QTest::mouseClick(button(d, "queue run"), Qt::LeftButton);
  CHECK(accepted.count() == 1);
  const RunConfig c = d.config();
  CHECK(c.recipe == "qat");
  CHECK(c.quantFormat == "mxfp4");
  CHECK(c.calibBatches == 0);
  CHECK(c.amaxMode == "dynamic");
}

TEST_CASE("setConfig then config() gives the same configuration", "[new-run-dialog]") {
  NewRunDialog d;
  const RunConfig c = sampleConfig();
  d.setConfig(c);
  REQUIRE(d.isValid());
  CHECK(d.config().toYaml() == c.toYaml());
  CHECK(qobject_cast<QLineEdit*>(fieldOf(d, "run.name"))->text() == "a: b # c");
  CHECK(qobject_cast<QLineEdit*>(fieldOf(d, "run.seed"))->text() == "18446744073709551615");
  CHECK(qobject_cast<QLineEdit*>(fieldOf(d, "optim.lr"))->text() == "0.0003");
  CHECK(qobject_cast<QComboBox*>(fieldOf(d, "recipe.name"))->currentText() == "qad");
  CHECK_FALSE(qobject_cast<QCheckBox*>(fieldOf(d, "data.pack"))->isChecked());
  CHECK(d.findChild<QLabel*>(QStringLiteral("label optim.lr"))->font().bold());
  CHECK_FALSE(d.findChild<QLabel*>(QStringLiteral("label optim.beta1"))->font().bold());
  CHECK(fieldOf(d, "recipe.teacher")->isVisibleTo(&d));

  // Back to the defaults.
  d.setConfig(RunConfig());
  CHECK(d.config().toYaml() == RunConfig().toYaml());
  CHECK_FALSE(d.findChild<QLabel*>(QStringLiteral("label optim.lr"))->font().bold());

  // A value of a key that does not apply (an MXFP4 scale rule on an sft run) is not kept.
  RunConfig sft;
  sft.scaleRule = "floor";
  d.setConfig(sft);
  REQUIRE(d.isValid());
  CHECK(d.config().scaleRule == "ceil");
  CHECK(d.config().toYaml() == RunConfig().toYaml());
}

TEST_CASE("saveFile writes run.yaml that openFile reads back", "[new-run-dialog]") {
  QTemporaryDir dir;
  REQUIRE(dir.isValid());
  const QString path = dir.filePath("run.yaml");
  const RunConfig c = sampleConfig();
  {
    NewRunDialog d;
    d.setConfig(c);
    QString error;
    REQUIRE(d.saveFile(path, &error));
    CHECK(error.isEmpty());
    CHECK(d.filePath() == path);
    // The engine's own YAML of the configuration, read back by the engine.
    CHECK(readAll(path).toStdString() == c.toYaml());
    CHECK(RunConfig::fromYamlFile(path.toStdString()).toYaml() == c.toYaml());
    CHECK(QDir(dir.path()).entryList(QDir::Files) == QStringList{"run.yaml"});  // no temp left
  }
  NewRunDialog d;
  QString error;
  REQUIRE(d.openFile(path, &error));
  CHECK(error.isEmpty());
  CHECK(d.isValid());
  CHECK(d.config().toYaml() == c.toYaml());
  CHECK(d.windowTitle().contains("run.yaml"));

  // A hand-written file with a few keys: the rest are defaults.
  const QString small = dir.filePath("small.yaml");
  writeAll(small, "recipe:\n  name: qat\nquant:\n  format: mxfp4\noptim:\n  lr: 2e-4\n");
  REQUIRE(d.openFile(small, &error));
  CHECK(qobject_cast<QComboBox*>(fieldOf(d, "quant.format"))->currentText() == "mxfp4");
  CHECK(d.config().toYaml() ==
        RunConfig::fromYamlText("", {"recipe.name=qat", "quant.format=mxfp4", "optim.lr=2e-4"})
            .toYaml());
}

TEST_CASE("a failed save reports why and leaves what was there", "[new-run-dialog]") {
  QTemporaryDir dir;
  REQUIRE(dir.isValid());
  NewRunDialog d;
  d.setConfig(sampleConfig());
  QString error;

  // The parent "folder" is a regular file: no one, root included, can create a file in it.
  const QString blocker = dir.filePath("blocker");
  writeAll(blocker, "not a folder\n");
  CHECK_FALSE(d.saveFile(blocker + "/run.yaml", &error));
  CHECK_FALSE(error.isEmpty());
  CHECK(error.contains("run.yaml"));
  CHECK(d.errorText() == error);
  CHECK(d.findChild<QLabel*>(QStringLiteral("message"))->text() == error);
  CHECK(readAll(blocker) == "not a folder\n");
  CHECK(d.filePath().isEmpty());

  // The target is a folder: the new file cannot replace it, and the folder and its content stay.
  const QString folder = dir.filePath("run.yaml");
  REQUIRE(QDir(dir.path()).mkdir("run.yaml"));
  writeAll(folder + "/keep.txt", "kept\n");
  error.clear();
  CHECK_FALSE(d.saveFile(folder, &error));
  CHECK_FALSE(error.isEmpty());
  CHECK(QFileInfo(folder).isDir());
  CHECK(readAll(folder + "/keep.txt") == "kept\n");
  CHECK(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden | QDir::NoDotAndDotDot) ==
        QStringList{"blocker"});  // no temporary file left behind

  // An invalid form is not saved over an existing file.
  const QString existing = dir.filePath("existing.yaml");
  writeAll(existing, "run:\n  name: old\n");
  typeInto(d, "optim.lr", "abc");
  error.clear();
  CHECK_FALSE(d.saveFile(existing, &error));
  CHECK(error.contains("optim.lr"));
  CHECK(readAll(existing) == "run:\n  name: old\n");

  // Fixed, the same dialog saves.
  typeInto(d, "optim.lr", "0.0003");
  REQUIRE(d.saveFile(existing, &error));
  CHECK(RunConfig::fromYamlFile(existing.toStdString()).toYaml() == sampleConfig().toYaml());
}

TEST_CASE("openFile reports the engine's error for a bad file and keeps the form",
          "[new-run-dialog]") {
  QTemporaryDir dir;
  REQUIRE(dir.isValid());
  NewRunDialog d;
  d.setConfig(sampleConfig());
  const std::string before = d.config().toYaml();
  QString error;

  const QString garbage = dir.filePath("garbage.yaml");
  writeAll(garbage, "run:\n  name: [unclosed\n  seed: {\n");
  CHECK_FALSE(d.openFile(garbage, &error));
  CHECK(error.contains("invalid YAML"));
  CHECK(error.contains("garbage.yaml:"));  // file:line
  CHECK(d.errorText() == error);
  CHECK(d.config().toYaml() == before);

  const QString typo = dir.filePath("typo.yaml");
  writeAll(typo, "optim:\n  lrr: 0.1\n");
  CHECK_FALSE(d.openFile(typo, &error));
  CHECK(error.contains("optim.lrr"));
  CHECK(error.contains("optim.lr'"));  // the engine's "did you mean 'optim.lr'?"
  CHECK(error.contains("typo.yaml:2"));

  CHECK_FALSE(d.openFile(dir.filePath("missing.yaml"), &error));
  CHECK(error.contains("missing.yaml"));
  CHECK(d.config().toYaml() == before);
  CHECK(d.filePath().isEmpty());
}

TEST_CASE("YAML scalars as the engine writes them, and back", "[new-run-dialog]") {
  CHECK(ConfigForm::plainScalar("\"\"") == "");
  CHECK(ConfigForm::plainScalar("builtin:tiny") == "builtin:tiny");
  // Numbers in their shortest form that reads back the same.
  ConfigKey number;
  number.type = KeyType::Number;
  CHECK(ConfigForm::normalized(number, "3e-4") == "0.0003");
  CHECK(ConfigForm::normalized(number, "0.10000000000000001") == "0.1");
  CHECK(ConfigForm::normalized(number, "1e-08") == "1e-8");
  CHECK(ConfigForm::normalized(number, "1e6") == "1000000");
  CHECK(ConfigForm::normalized(number, "1.5e-300").toDouble() == 1.5e-300);
  CHECK(ConfigForm::normalized(number, "abc") == "abc");
  ConfigKey integer;
  integer.type = KeyType::Integer;
  CHECK(ConfigForm::normalized(integer, "+007") == "7");
  CHECK(ConfigForm::normalized(integer, "-0") == "0");
  CHECK(ConfigForm::normalized(integer, "18446744073709551615") == "18446744073709551615");
  CHECK(ConfigForm::plainScalar("'it''s'") == "it's");
  CHECK(ConfigForm::plainScalar("\"a\\\"b\\\\c\\nd\\x41\\u00e9\"") ==
        QString::fromUtf8("a\"b\\c\ndA\xc3\xa9"));
  for (const QString& s :
       {QString(), QStringLiteral("a: b # c"), QStringLiteral("'q' \"d\" \\ \t\n end"),
        QStringLiteral("[x, {y}]"), QString::fromUtf8("caf\xc3\xa9")}) {
    INFO(s.toStdString());
    const std::string assignment = "run.name=" + ConfigForm::quotedScalar(s).toStdString();
    RunConfig c;
    c.name = "x";
    c.applyOverride(assignment);
    CHECK(qs(c.name) == s);
    CHECK(ConfigForm::plainScalar(c.valueOf("run.name")) == s);
  }
}

// Not run by default: renders the dialog to /tmp/newrun*.png to look at (under Xvfb or
// offscreen).
TEST_CASE("screenshots of the New run dialog", "[.screenshot][new-run-dialog]") {
  NewRunDialog d;
  d.resize(1080, 780);
  d.show();
  REQUIRE(QTest::qWaitForWindowExposed(&d));
  QTest::qWait(100);
  REQUIRE(d.grab().save("/tmp/newrun.png"));

  choose(d, "recipe.name", "qat");
  d.form()->ensureKeyVisible("quant.format");
  QTest::qWait(100);
  REQUIRE(d.grab().save("/tmp/newrun-qat-error.png"));

  d.setConfig(sampleConfig());
  typeInto(d, "optim.lr", "abc");
  QTest::qWait(100);
  REQUIRE(d.grab().save("/tmp/newrun-qad-error.png"));

  d.resize(640, 480);
  QTest::qWait(200);
  REQUIRE(d.grab().save("/tmp/newrun-small.png"));
}

TEST_CASE("a model folder or data file that is not there disables Queue as you type",
          "[new-run-dialog]") {
  QTemporaryDir dir;
  REQUIRE(dir.isValid());
  NewRunDialog d;
  d.show();
  REQUIRE(QTest::qWaitForWindowExposed(&d));
  QPushButton* queue = button(d, "queue run");
  const QString model = dir.filePath(QStringLiteral("model"));
  // typeInto waits for `validated`, which comes after the check on disk.
  typeInto(d, "model.path", model);
  CHECK_FALSE(d.isCheckingInputs());
  CHECK_FALSE(d.isValid());
  CHECK_FALSE(queue->isEnabled());
  CHECK(d.errorKey() == "model.path");
  CHECK(errorLabelOf(d, "model.path")->isVisibleTo(&d));
  CHECK(errorLabelOf(d, "model.path")->text().contains("model folder does not exist"));
  CHECK(d.errorText().contains(model));
  d.accept();
  CHECK(d.result() != QDialog::Accepted);

  // A folder whose config.json is damaged.
  REQUIRE(QDir().mkpath(model));
  writeAll(model + "/config.json", "{\"hidden_size\": ");
  writeAll(model + "/model.safetensors", "");
  typeInto(d, "model.path", model + "/");
  CHECK(d.errorKey() == "model.path");
  CHECK(d.errorText().contains("config.json is not a JSON object"));
  writeAll(model + "/config.json", "{\"hidden_size\": 64}");
  typeInto(d, "model.path", model);
  CHECK(d.isValid());
  CHECK(queue->isEnabled());

  // Data files: a missing one, then one that is there.
  typeInto(d, "data.train", dir.filePath(QStringLiteral("train.jsonl")));
  CHECK(d.errorKey() == "data.train");
  CHECK(errorLabelOf(d, "data.train")->text().contains("data file does not exist"));
  CHECK_FALSE(queue->isEnabled());
  writeAll(dir.filePath(QStringLiteral("train.jsonl")), "{\"text\": \"hi\"}\n");
  typeInto(d, "data.train", dir.filePath(QStringLiteral("train.jsonl")));
  CHECK(d.isValid());
  CHECK(queue->isEnabled());
}

TEST_CASE("Queue runs train --dry-run first and queues only what passes", "[new-run-dialog]") {
  QTemporaryDir dir;
  REQUIRE(dir.isValid());
  // A stand-in for fp4lab: refuses the way train does (its failed event names the key).
  const QString refuse = dir.filePath(QStringLiteral("refuse.sh"));
  writeAll(refuse,
           "#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/args\"\n"
           "echo '{\"event\":\"failed\",\"message\":\"data.seq_len: longer than the model "
           "allows\"}'\nexit 2\n");
  QFile::setPermissions(refuse, QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
  NewRunDialog d;
  d.setDryRunProgram(refuse);
  d.show();
  REQUIRE(QTest::qWaitForWindowExposed(&d));
  d.accept();
  CHECK(d.isDryRunning());
  CHECK_FALSE(button(d, "queue run")->isEnabled());  // one check at a time
  REQUIRE(fp4lab::testing::waitFor([&] { return !d.isDryRunning(); }));
  CHECK(d.result() != QDialog::Accepted);
  CHECK(d.isVisible());
  CHECK(d.errorKey() == "data.seq_len");
  CHECK(errorLabelOf(d, "data.seq_len")->text().contains("longer than the model allows"));
  CHECK(d.errorText().startsWith("Not queued"));
  CHECK(button(d, "queue run")->text() == "&Queue run");
  const QString args = QString::fromUtf8(readAll(dir.filePath(QStringLiteral("args"))));
  CHECK(args.contains("train --config"));
  CHECK(args.contains("--dry-run"));

  // One that passes: accepted.
  const QString pass = dir.filePath(QStringLiteral("pass.sh"));
  writeAll(pass, "#!/bin/sh\nexit 0\n");
  QFile::setPermissions(pass, QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
  d.setDryRunProgram(pass);
  d.accept();
  REQUIRE(fp4lab::testing::waitFor([&] { return !d.isDryRunning(); }));
  CHECK(d.result() == QDialog::Accepted);
}

TEST_CASE("the real train --dry-run refuses what only a full load finds", "[new-run-dialog]") {
  const char* bin = std::getenv("FP4LAB_BIN");
  REQUIRE(bin);  // CTest sets it to the fp4lab executable
  QTemporaryDir dir;
  REQUIRE(dir.isValid());
  // A data file that opens but whose first row is not an example.
  const QString data = dir.filePath(QStringLiteral("bad.jsonl"));
  writeAll(data, "{\"messages\": [{\"role\": \"user\"}]}\n");
  NewRunDialog d;
  d.setDryRunProgram(QString::fromUtf8(bin));
  d.show();
  REQUIRE(QTest::qWaitForWindowExposed(&d));
  typeInto(d, "data.train", data);
  REQUIRE(d.isValid());  // the quick check passes: the file is there
  d.accept();
  REQUIRE(fp4lab::testing::waitFor([&] { return !d.isDryRunning(); }, 120000));
  CHECK(d.result() != QDialog::Accepted);
  INFO(d.errorText().toStdString());
  CHECK(d.errorText().contains("bad.jsonl:1"));
}

TEST_CASE("every field is announced with its label and its help in plain words",
          "[new-run-dialog][a11y]") {
  NewRunDialog d;
  d.show();
  REQUIRE(QTest::qWaitForWindowExposed(&d));
  int checked = 0;
  for (const ConfigKey& key : runConfigKeys()) {
    QWidget* field = fieldOf(d, key.name.c_str());
    QAccessibleInterface* iface = QAccessible::queryAccessibleInterface(field);
    REQUIRE(iface);
    INFO(key.name);
    // The label relation Qt reports to AT-SPI (labelled-by): the label naming the key.
    const auto labels = iface->relations(QAccessible::Label);
    REQUIRE(labels.size() >= 1);
    CHECK(labels.front().first->text(QAccessible::Name) == qs(key.name));
    // The description is the help, not the tooltip's HTML.
    const QString description = iface->text(QAccessible::Description);
    CHECK_FALSE(description.contains(QLatin1String("<p>")));
    CHECK(description.startsWith(qs(key.help)));
    ++checked;
  }
  CHECK(checked == int(runConfigKeys().size()));
  // A changed field says so after its help.
  choose(d, "recipe.name", "qat");
  const QString described = QAccessible::queryAccessibleInterface(fieldOf(d, "recipe.name"))
                                ->text(QAccessible::Description);
  CHECK(described.contains(QLatin1String("Changed from the default, sft")));
}
