// Command-line plumbing shared by the subcommands: argument parsing with clear errors, and the
// command table.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace fp4lab::cli {

// Parsed arguments: positionals in order, `--name value` options and `--flag` switches.
class Args {
 public:
  // `flags` are the switches that take no value; every other `--name` takes one.
  Args(const std::string& command, const std::vector<std::string>& argv,
       const std::vector<std::string>& options, const std::vector<std::string>& flags);
  const std::vector<std::string>& positionals() const { return m_positionals; }
  bool has(const std::string& name) const { return m_values.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback) const;
  // One of `allowed`, or an error naming the choices.
  std::string choice(const std::string& name, const std::vector<std::string>& allowed,
                     const std::string& fallback) const;
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

}  // namespace fp4lab::cli
