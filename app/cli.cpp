// Argument parsing for the subcommands: unknown options and missing values are errors that say
// which command and what it accepts.
#include "cli.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "fp4lab/error.h"
#include "fp4lab/run/config_keys.h"

namespace fp4lab::cli {

Args::Args(const std::string& command, const std::vector<std::string>& argv,
           const std::vector<std::string>& options, const std::vector<std::string>& flags)
    : m_command(command) {
  auto known = [](const std::vector<std::string>& list, const std::string& s) {
    return std::find(list.begin(), list.end(), s) != list.end();
  };
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i] == "-h" ? std::string("--help") : argv[i];
    if (a.size() > 2 && a.compare(0, 2, "--") == 0) {
      std::string name = a.substr(2), value;
      size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      if (known(flags, name)) {
        if (eq != std::string::npos)
          throw Error("--" + name + " takes no value (it is a switch)", "fp4lab " + command,
                      "write --" + name + " to turn it on, and leave it out to keep it off");
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
    } else if (a.size() > 1 && a[0] == '-' && !(a[1] >= '0' && a[1] <= '9') && a[1] != '.') {
      throw Error("unknown option " + a, "fp4lab " + command,
                  "options are spelled --name; see fp4lab " + command + " --help");
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
  auto arguments = [](size_t n) {
    return std::to_string(n) + (n == 1 ? " argument" : " arguments");
  };
  if (m_positionals.size() != count)
    throw Error("expected " + arguments(count) + ", got " + std::to_string(m_positionals.size()),
                "fp4lab " + m_command, "usage: " + usage);
}

int64_t Args::integer(const std::string& name, int64_t fallback, int64_t min, int64_t max) const {
  if (!has(name)) return fallback;
  const std::string v = get(name, "");
  size_t used = 0;
  long long parsed = 0;
  bool ok = !v.empty() && v.find_first_not_of("+-0123456789") == std::string::npos;
  if (ok) {
    try {
      parsed = std::stoll(v, &used);
    } catch (const std::exception&) {
      ok = false;
    }
  }
  if (!ok || used != v.size() || parsed < min || parsed > max)
    throw Error("--" + name + " must be an integer from " + std::to_string(min) + " to " +
                    std::to_string(max) + ", not '" + v + "'",
                "fp4lab " + m_command);
  return parsed;
}

double Args::number(const std::string& name, double fallback, double min, double max) const {
  if (!has(name)) return fallback;
  const std::string v = get(name, "");
  char* end = nullptr;
  const double parsed = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(parsed >= min && parsed <= max)) {
    char range[96];
    std::snprintf(range, sizeof range, "from %g to %g", min, max);
    throw Error("--" + name + " must be a number " + range + ", not '" + v + "'",
                "fp4lab " + m_command);
  }
  return parsed;
}

std::string keyTable(bool experiment) {
  const std::vector<run::ConfigKey>& keys =
      experiment ? run::experimentConfigKeys() : run::runConfigKeys();
  std::string out = experiment ? "| key | type | default | meaning |\n| --- | --- | --- | --- |\n"
                               : "| key | type | default | meaning | defines the run |\n"
                                 "| --- | --- | --- | --- | --- |\n";
  for (const auto& k : keys) {
    std::string help, type = k.typeDescription();
    for (char c : k.help) help += c == '|' ? std::string("\\|") : std::string(1, c);
    const std::string range = k.rangeDescription();
    if (!range.empty()) type += ", " + range;
    out += "| `" + k.name + "` | " + type + " | " +
           (k.defaultValue.empty() || k.defaultValue == "\"\"" ? "" : "`" + k.defaultValue + "`") +
           " | " + help + " |" + (experiment ? "" : (k.definesRun ? " yes |" : " no |")) + "\n";
  }
  return out;
}

}  // namespace fp4lab::cli
