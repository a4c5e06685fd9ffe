// Command-line plumbing shared by the subcommands: argument parsing with clear errors, and the
// command table.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fp4lab::cli {

// Parsed arguments: positionals in order, `--name value` options and `--flag` switches.
class Args {
 public:
  // `flags` are the switches that take no value; every other `--name` takes one. `-h` is --help.
  Args(const std::string& command, const std::vector<std::string>& argv,
       const std::vector<std::string>& options, const std::vector<std::string>& flags);
  const std::vector<std::string>& positionals() const { return m_positionals; }
  bool has(const std::string& name) const { return m_values.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback) const;
  // One of `allowed`, or an error naming the choices.
  std::string choice(const std::string& name, const std::vector<std::string>& allowed,
                     const std::string& fallback) const;
  // --name as an integer / a number in [min, max], or an error saying what it must be.
  int64_t integer(const std::string& name, int64_t fallback, int64_t min, int64_t max) const;
  double number(const std::string& name, double fallback, double min, double max) const;
  void requirePositionals(size_t count, const std::string& usage) const;

 private:
  std::string m_command;
  std::vector<std::string> m_positionals;
  std::map<std::string, std::string> m_values;
};

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);  // returns the exit code
};

int runQuantize(const std::vector<std::string>& args);
int runDequantize(const std::vector<std::string>& args);
int runTrain(const std::vector<std::string>& args);
int runInspect(const std::vector<std::string>& args);
int runEval(const std::vector<std::string>& args);
int runGenerate(const std::vector<std::string>& args);
int runBaseModel(const std::vector<std::string>& args);
int runExperiment(const std::vector<std::string>& args);
int runImport(const std::vector<std::string>& args);
int runExport(const std::vector<std::string>& args);   // engine/export/ (fp4lab_export)
int runAnalyze(const std::vector<std::string>& args);  // engine/analyze/ (fp4lab_analyze)
int runTokenize(const std::vector<std::string>& args);
int runSensitivity(const std::vector<std::string>& args);  // engine/run/sensitivity.cpp
#ifdef FP4LAB_WITH_WIDGETS
int runGui(const std::vector<std::string>& args);  // the workbench window
#endif

// The keys of a configuration as a markdown table (key, type, default, meaning): what
// --list-keys prints and docs/user-guide.md shows.
std::string keyTable(bool experiment);

}  // namespace fp4lab::cli
