// Argument parsing for the subcommands: unknown options and missing values are errors that say
// which command and what it accepts.
#include "cli.h"

#include <algorithm>

#include "fp4lab/error.h"

namespace fp4lab::cli {

Args::Args(const std::string& command, const std::vector<std::string>& argv,
           const std::vector<std::string>& options, const std::vector<std::string>& flags)
    : m_command(command) {
  auto known = [](const std::vector<std::string>& list, const std::string& s) {
    return std::find(list.begin(), list.end(), s) != list.end();
  };
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.size() > 2 && a.compare(0, 2, "--") == 0) {
      std::string name = a.substr(2), value;
      size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      if (known(flags, name)) {
        m_values[name] = "1";
      } else if (known(options, name)) {
        if (eq == std::string::npos) {
          if (i + 1 >= argv.size())
            throw Error("option --" + name + " needs a value", "fp4lab " + command,
                        "see fp4lab " + command + " --help");
          value = argv[++i];
        }
        m_values[name] = value;
      } else {
        throw Error("unknown option " + a, "fp4lab " + command,
                    "see fp4lab " + command + " --help");
      }
    } else {
      m_positionals.push_back(a);
    }
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = m_values.find(name);
  return it == m_values.end() ? fallback : it->second;
}

std::string Args::choice(const std::string& name, const std::vector<std::string>& allowed,
                         const std::string& fallback) const {
  std::string v = get(name, fallback);
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    throw Error("--" + name + " must be one of " + list + ", not '" + v + "'",
                "fp4lab " + m_command);
  }
  return v;
}

void Args::requirePositionals(size_t count, const std::string& usage) const {
  if (m_positionals.size() != count)
    throw Error("expected " + std::to_string(count) + " arguments, got " +
                    std::to_string(m_positionals.size()),
                "fp4lab " + m_command, "usage: " + usage);
}

}  // namespace fp4lab::cli
