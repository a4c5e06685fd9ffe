// Opens and checks schema 1's datasets (declared in log_layout.h) so that readers and resume fail
// at open with a precise message; also root attributes, name checks and event lines.
#include "log_layout.h"

#include "fp4lab/common/time.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <optional>
#include <set>
#include <utility>

namespace fp4lab::log::detail {

// ---- Layout: the datasets of an open log and the schema they imply -----------------------------

Hid openDataset(hid_t file, const std::string& name, const std::string& path) {
  if (!hasLink(file, name, path))
    fail("missing dataset " + name, path, "damaged or not an fp4lab run log");
  return own(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose, "cannot open dataset",
             at(path, name), "damaged or not an fp4lab run log");
}

Hid typeOf(hid_t dataset, const std::string& where) {
  return own(H5Dget_type(dataset), H5Tclose, "cannot read the type", where);
}

std::vector<std::string> readFixedStrings(hid_t dataset, hsize_t count, const std::string& where) {
  Hid type = typeOf(dataset, where);
  if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0)
    fail("expected fixed-length strings", where, "damaged or not an fp4lab run log");
  const size_t size = H5Tget_size(type.get());
  std::vector<char> buffer(count * size + 1, '\0');
  readRows(dataset, 0, count, 0, type.get(), buffer.data(), where);
  std::vector<std::string> strings;
  strings.reserve(count);
  for (hsize_t i = 0; i < count; ++i) {
    const char* text = buffer.data() + i * size;
    strings.emplace_back(text, strnlen(text, size));
  }
  return strings;
}

std::vector<std::string> linkNames(hid_t group, const std::string& where) {
  H5G_info_t info{};
  check(H5Gget_info(group, &info), "cannot list the group", where);
  const H5_index_t index = H5Lget_name_by_idx(group, ".", H5_INDEX_CRT_ORDER, H5_ITER_INC, 0,
                                              nullptr, 0, H5P_DEFAULT) >= 0
                               ? H5_INDEX_CRT_ORDER
                               : H5_INDEX_NAME;
  hdf5Detail();  // the probe above may leave an error on the stack
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t length =
        check(H5Lget_name_by_idx(group, ".", index, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT),
              "cannot list the group", where);
    std::string name(static_cast<size_t>(length) + 1, '\0');
    check(H5Lget_name_by_idx(group, ".", index, H5_ITER_INC, i, name.data(), name.size(),
                             H5P_DEFAULT),
          "cannot list the group", where);
    name.resize(static_cast<size_t>(length));
    names.push_back(name);
  }
  return names;
}

Layout openLayout(hid_t file, const std::string& path) {
  Layout layout;
  const std::string damaged = "damaged or not an fp4lab run log";

  layout.train = openDataset(file, kTrain, path);
  {
    Hid type = typeOf(layout.train.get(), at(path, kTrain));
    if (H5Tget_class(type.get()) != H5T_COMPOUND)
      fail("expected a compound table", at(path, kTrain), damaged);
    for (const char* field : kTrainFields)
      if (H5Tget_member_index(type.get(), field) < 0)
        fail(std::string("missing field ") + field, at(path, kTrain), damaged);
  }

  layout.eval = openDataset(file, kEval, path);
  {
    Hid type = typeOf(layout.eval.get(), at(path, kEval));
    if (H5Tget_class(type.get()) != H5T_COMPOUND)
      fail("expected a compound table", at(path, kEval), damaged);
    const int members = H5Tget_nmembers(type.get());
    if (members < 3) fail("expected step, tokens, wall_s and columns", at(path, kEval), damaged);
    for (int i = 0; i < members; ++i) {
      const std::string name = memberName(type.get(), static_cast<unsigned>(i));
      if (i < 3) {
        if (name != kEvalFixed[i])
          fail("field " + std::to_string(i) + " is '" + name + "', expected " + kEvalFixed[i],
               at(path, kEval), damaged);
      } else {
        layout.schema.evalColumns.push_back(name);
      }
    }
  }

  layout.events = openDataset(file, kEvents, path);
  {
    Hid type = typeOf(layout.events.get(), at(path, kEvents));
    if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0)
      fail("expected fixed-length strings", at(path, kEvents), damaged);
    layout.eventBytes = H5Tget_size(type.get());
  }

  Hid layers = openDataset(file, kQuantLayers, path);
  layout.schema.quantLayers = readFixedStrings(
      layers.get(), rowsOf(layers.get(), at(path, kQuantLayers)), at(path, kQuantLayers));
  const int64_t layerCount = static_cast<int64_t>(layout.schema.quantLayers.size());
  layout.quantStep = openDataset(file, kQuantStep, path);

  Hid quant = own(H5Gopen2(file, kQuant, H5P_DEFAULT), H5Gclose, "cannot open group",
                  at(path, kQuant), damaged);
  for (const std::string& name : linkNames(quant.get(), at(path, kQuant))) {
    if (std::find(std::begin(kQuantReserved), std::end(kQuantReserved), name) !=
        std::end(kQuantReserved))
      continue;
    const std::string full = std::string(kQuant) + "/" + name;
    Hid metric = openDataset(file, full, path);
    if (columnsOf(metric.get(), at(path, full)) != layerCount)
      fail("expected one column per layer (" + std::to_string(layerCount) + ")", at(path, full),
           damaged);
    layout.schema.quantMetrics.push_back(name);
    layout.quantMetrics.push_back(std::move(metric));
  }

  if (hasLink(file, kQuantBlocks, path)) {
    for (int64_t layer = 0; layer < layerCount; ++layer) {
      const std::string full = std::string(kQuantBlocks) + "/" + std::to_string(layer);
      if (hasLink(file, full, path)) {
        Hid blocks = openDataset(file, full, path);
        layout.schema.blocksPerLayer.push_back(columnsOf(blocks.get(), at(path, full)));
        layout.schema.blockRowsPerLayer.push_back(
            readInt64Attribute(blocks.get(), "rows", at(path, full)).value_or(0));
        layout.quantBlocks.push_back(std::move(blocks));
      } else {
        layout.schema.blocksPerLayer.push_back(0);
        layout.schema.blockRowsPerLayer.push_back(0);
        layout.quantBlocks.emplace_back();
      }
    }
  }
  return layout;
}

std::vector<hid_t> allDatasets(const Layout& layout) {
  std::vector<hid_t> ids = {layout.train.get(), layout.eval.get(), layout.events.get(),
                            layout.quantStep.get()};
  for (const Hid& metric : layout.quantMetrics) ids.push_back(metric.get());
  for (const Hid& blocks : layout.quantBlocks)
    if (blocks.valid()) ids.push_back(blocks.get());
  return ids;
}

int64_t completeQuantRows(const Layout& layout, const std::string& path) {
  int64_t rows = rowsOf(layout.quantStep.get(), at(path, kQuantStep));
  for (const Hid& metric : layout.quantMetrics)
    rows = std::min(rows, rowsOf(metric.get(), at(path, kQuant)));
  for (const Hid& blocks : layout.quantBlocks)
    if (blocks.valid()) rows = std::min(rows, rowsOf(blocks.get(), at(path, kQuantBlocks)));
  return rows;
}

RootAttributes readRootAttributes(hid_t file, const std::string& path) {
  const std::optional<int64_t> version = readInt64Attribute(file, "schema_version", path);
  if (!version)
    fail("not an fp4lab run log (no schema_version attribute)", path,
         "expected a run's log.h5 written by fp4lab");
  if (*version < 1 || *version > kSchemaVersion)
    fail("run log schema " + std::to_string(*version) + " is not supported (this build reads " +
             std::to_string(kSchemaVersion) + ")",
         path, *version > kSchemaVersion ? "written by a newer fp4lab: update fp4lab" : "");
  RootAttributes attributes;
  attributes.schemaVersion = static_cast<int>(*version);
  attributes.runId = readStringAttribute(file, "run_id", path).value_or("");
  attributes.recipe = readStringAttribute(file, "recipe", path).value_or("");
  attributes.format = readStringAttribute(file, "format", path).value_or("");
  attributes.createdUtc = readStringAttribute(file, "created_utc", path).value_or("");
  attributes.configYaml = readStringAttribute(file, "config_yaml", path).value_or("");
  return attributes;
}

void writeWriterIdentity(hid_t file, const std::string& path) {
  writeInt64Attribute(file, "writer_pid", static_cast<int64_t>(::getpid()), path);
  writeStringAttribute(file, "writer_host", hostName(), path);
}

// ---- Validation --------------------------------------------------------------------------------

namespace {

void checkNames(const std::vector<std::string>& names, const char* what,
                const std::vector<std::string>& reserved, const std::string& path) {
  std::set<std::string> seen;
  for (const std::string& name : names) {
    if (name.empty()) fail(std::string("empty name in ") + what, path);
    if (name.find('/') != std::string::npos || name == "." || name.find('\0') != std::string::npos)
      fail(std::string("invalid name '") + name + "' in " + what, path,
           "names must not contain '/' or NUL");
    if (std::find(reserved.begin(), reserved.end(), name) != reserved.end())
      fail(std::string("reserved name '") + name + "' in " + what, path);
    if (!seen.insert(name).second)
      fail(std::string("duplicate name '") + name + "' in " + what, path);
  }
}

}  // namespace

void validate(const RootAttributes& attributes, const RunLogSchema& schema,
              const std::string& path) {
  if (attributes.schemaVersion != kSchemaVersion)
    fail("cannot write schema " + std::to_string(attributes.schemaVersion), path,
         "this build writes schema " + std::to_string(kSchemaVersion));
  checkNames(schema.evalColumns, "evalColumns", {"step", "tokens", "wall_s"}, path);
  checkNames(schema.quantLayers, "quantLayers", {}, path);
  checkNames(schema.quantMetrics, "quantMetrics", {"layers", "step", "blocks"}, path);
  if (schema.quantLayers.empty() && !schema.quantMetrics.empty())
    fail("quantMetrics given but no quantLayers", path,
         "a run that quantizes no layer logs no quant metrics: pass empty quantMetrics");
  if (!schema.blocksPerLayer.empty()) {
    if (schema.blocksPerLayer.size() != schema.quantLayers.size())
      fail("blocksPerLayer has " + std::to_string(schema.blocksPerLayer.size()) + " entries for " +
               std::to_string(schema.quantLayers.size()) + " layers",
           path, "give one block count per quantized layer, or none");
    for (int64_t blocks : schema.blocksPerLayer)
      if (blocks < 0) fail("negative block count in blocksPerLayer", path);
  }
  if (!schema.blockRowsPerLayer.empty()) {
    if (schema.blockRowsPerLayer.size() != schema.blocksPerLayer.size())
      fail("blockRowsPerLayer has " + std::to_string(schema.blockRowsPerLayer.size()) +
               " entries for " + std::to_string(schema.blocksPerLayer.size()) + " block counts",
           path, "give one row count per entry of blocksPerLayer, or none");
    for (size_t l = 0; l < schema.blockRowsPerLayer.size(); ++l) {
      const int64_t rows = schema.blockRowsPerLayer[l], blocks = schema.blocksPerLayer[l];
      if (rows < 0 || (rows > 0 && blocks % rows != 0))
        fail("blockRowsPerLayer[" + std::to_string(l) + "] = " + std::to_string(rows) +
                 " does not divide the layer's " + std::to_string(blocks) + " blocks",
             path, "give the weight's row count (0 if unknown)");
    }
  }
}

bool validKind(const std::string& kind) {
  if (kind.empty() || kind.size() > kMaxKindLength) return false;
  return std::all_of(kind.begin(), kind.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string eventLine(const std::string& kind, const std::string& text, size_t limit) {
  std::string line = utcTimestamp(true) + " " + kind + " " + text;
  for (char& c : line)
    if (c == '\n' || c == '\r' || c == '\t' || c == '\0') c = ' ';
  if (line.size() > limit) {
    size_t cut = limit;
    while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
    line.resize(cut);
  }
  return line;
}

}  // namespace fp4lab::log::detail
