// The keys of the run configuration and of the experiment: name, type, default, choices, bounds
// and help, from the one table the parsers use. Plain C++, so the command line's --list-keys,
// the user guide's table and the GUI's run form all read the same source.
#pragma once

#include <limits>
#include <string>
#include <vector>

namespace fp4lab::run {

enum class KeyType { String, Integer, Number, Boolean, Choice };

struct ConfigKey {
  std::string name;  // "optim.lr" (run config), "qat_steps" (experiment)
  KeyType type = KeyType::String;
  std::vector<std::string> choices;  // KeyType::Choice
  // Inclusive bounds of integers and numbers; exclusive where minExclusive / maxExclusive.
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool minExclusive = false, maxExclusive = false;
  std::string help;
  std::string defaultValue;  // as YAML text
  // Run config only: false for keys that may change when a run is resumed and that do not change
  // what a run computes (threads, how often it checkpoints); the experiment ignores them when it
  // decides whether a finished run can be reused.
  bool definesRun = true;
  // A file or folder: two values naming the same one (files::samePath) are the same value.
  bool isPath = false;

  // "an integer", "a number", "true or false", "one of sft, ptq, qat, qad", "a string".
  std::string typeDescription() const;
  // The bounds of an integer or number, as the messages and tables write them: "in [1, 65536]",
  // "positive", "at least 0"; "" when unbounded (bounds past 1e18 are the type's own, e.g. a
  // seed's 2^64 - 1, and not spelled out).
  std::string rangeDescription() const;
  // "" when `value` (YAML scalar text) is acceptable, else what is wrong with it ("must be an
  // integer, not 'ten'", "must be at least 1, not 0").
  std::string check(const std::string& value) const;
};

const std::vector<ConfigKey>& runConfigKeys();
const std::vector<ConfigKey>& experimentConfigKeys();

// The closest of `names` to `name` (edit distance at most 3), or "".
std::string closestName(const std::string& name, const std::vector<std::string>& names);

}  // namespace fp4lab::run
