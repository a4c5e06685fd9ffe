// Whether what a run config names is there, checked without loading it: model folders (the
// folder, a config.json that parses, the weights' file) and data files (they open). Plain C++
// and quick (no tensor is read): the runner checks a new run's inputs with it before it touches
// the run folder, and the workbench's New run dialog as the user types (off its GUI thread). The
// full load (`fp4lab train --dry-run`) checks the rest: shapes, dtypes, the tokenizer.
#pragma once

#include <string>

#include "fp4lab/run/run_config.h"

namespace fp4lab::run {

// A Hugging Face model folder (or an fp4lab export of one): it exists, is a folder, holds a
// config.json that parses as a JSON object and model.safetensors (or its index). Throws
// fp4lab::Error with `dir` as where.
void checkModelFolder(const std::string& dir);

// Every model and data source `config` names: model.path, recipe.teacher (QAD), eval.reference,
// data.train, data.validation. Built-ins (builtin:..., scratch:..., random:...) are the engine's
// own and are not checked here. Throws fp4lab::Error whose where is the key at fault and whose
// problem names the path.
void checkInputs(const RunConfig& config);
// Whether checkInputs has anything on disk to look at (false: every source is a built-in).
bool hasInputsOnDisk(const RunConfig& config);

}  // namespace fp4lab::run
