// The datasets of an open log and the schema they imply (Layout), root attributes, validation
// and event lines: shared by the writer, resume() and the reader; private to engine/log.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fp4lab/log/run_log.h"
#include "hdf5_handles.h"

namespace fp4lab::log::detail {

// ---- Layout: the datasets of an open log and the schema they imply -----------------------------

struct Layout {
  Hid train, eval, events, quantStep;
  std::vector<Hid> quantMetrics;  // schema.quantMetrics order
  std::vector<Hid> quantBlocks;   // one per layer when /quant/blocks exists; invalid where B_l = 0
  RunLogSchema schema;
  size_t eventBytes = kEventBytes;
};

Hid openDataset(hid_t file, const std::string& name, const std::string& path);
Hid typeOf(hid_t dataset, const std::string& where);
std::vector<std::string> readFixedStrings(hid_t dataset, hsize_t count, const std::string& where);

// Link names of a group in creation order (the schema's metric order), or by name for groups
// made without creation-order tracking.
std::vector<std::string> linkNames(hid_t group, const std::string& where);

// Opens every dataset of schema 1 and checks their shapes and types, so readers and resume fail
// at open with a precise message rather than halfway through a read.
Layout openLayout(hid_t file, const std::string& path);

// Every dataset of a layout, for refresh.
std::vector<hid_t> allDatasets(const Layout& layout);

// Rows present in /quant/step and in every other /quant dataset: a reader may refresh between
// two datasets of one appendQuant, and a crashed writer may have stopped halfway through one.
int64_t completeQuantRows(const Layout& layout, const std::string& path);

RootAttributes readRootAttributes(hid_t file, const std::string& path);
void writeWriterIdentity(hid_t file, const std::string& path);

// ---- Validation --------------------------------------------------------------------------------

void validate(const RootAttributes& attributes, const RunLogSchema& schema,
              const std::string& path);
bool validKind(const std::string& kind);

// "<UTC> <kind> <text>" on one line, at most `limit` bytes, never cut inside a UTF-8 sequence.
std::string eventLine(const std::string& kind, const std::string& text, size_t limit);

}  // namespace fp4lab::log::detail
