// The machinery behind RunConfig and ExperimentConfig: a table of keys bound to struct members,
// and one parser for YAML files, YAML text and `key=value` overrides, so both configurations
// report bad input the same way: what (the key and the value), where (file:line or the command
// line), what to do (the key's help, or the closest known key).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "fp4lab/error.h"
#include "fp4lab/run/config_keys.h"

namespace fp4lab::run::keys {

// Key descriptions, for the tables.
inline ConfigKey text(const char* name, const char* help) {
  ConfigKey k;
  k.name = name, k.type = KeyType::String, k.help = help;
  return k;
}
inline ConfigKey choice(const char* name, std::vector<std::string> choices, const char* help) {
  ConfigKey k = text(name, help);
  k.type = KeyType::Choice, k.choices = std::move(choices);
  return k;
}
inline ConfigKey boolean(const char* name, const char* help) {
  ConfigKey k = text(name, help);
  k.type = KeyType::Boolean;
  return k;
}
inline ConfigKey integer(const char* name, double min, double max, const char* help) {
  ConfigKey k = text(name, help);
  k.type = KeyType::Integer, k.min = min, k.max = max;
  return k;
}
inline ConfigKey real(const char* name, double min, double max, const char* help,
                      bool minExclusive = false, bool maxExclusive = false) {
  ConfigKey k = text(name, help);
  k.type = KeyType::Number, k.min = min, k.max = max;
  k.minExclusive = minExclusive, k.maxExclusive = maxExclusive;
  return k;
}

template <class C>
struct Binding {
  ConfigKey key;
  std::function<void(C&, const std::string& text)> set;  // text has passed key.check()
  std::function<YAML::Node(const C&)> get;
};

template <class T>
T parseValue(const std::string& text) {
  if constexpr (std::is_same_v<T, bool>) {
    std::string v;
    for (char ch : text) v += char(std::tolower(static_cast<unsigned char>(ch)));
    return v == "true" || v == "yes" || v == "on" || v == "1";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return text;
  } else if constexpr (std::is_floating_point_v<T>) {
    return T(std::strtod(text.c_str(), nullptr));
  } else if constexpr (std::is_unsigned_v<T>) {
    return T(std::strtoull(text.c_str(), nullptr, 10));
  } else {
    return T(std::strtoll(text.c_str(), nullptr, 10));
  }
}

// A number as the shortest text that reads back as the same double (0.05, not yaml-cpp's
// 0.050000000000000003): what run.yaml, the key table and the window show.
inline YAML::Node numberNode(double v) {
  if (!std::isfinite(v)) return YAML::Node(v);
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, v, std::chars_format::general).ptr;
  return YAML::Node(std::string(text, end));
}

template <class C, class T>
Binding<C> bind(T C::*member, ConfigKey key) {
  Binding<C> b;
  b.key = std::move(key);
  b.set = [member](C& c, const std::string& text) { c.*member = parseValue<T>(text); };
  b.get = [member](const C& c) {
    if constexpr (std::is_floating_point_v<T>) return numberNode(double(c.*member));
    return YAML::Node(c.*member);
  };
  return b;
}

// Fills each key's defaultValue from a default-constructed configuration.
template <class C>
std::vector<ConfigKey> describe(const std::vector<Binding<C>>& table) {
  const C defaults{};
  std::vector<ConfigKey> out;
  for (const auto& b : table) {
    ConfigKey k = b.key;
    YAML::Emitter e;
    e << b.get(defaults);
    k.defaultValue = e.c_str();
    out.push_back(std::move(k));
  }
  return out;
}

template <class C>
const Binding<C>* find(const std::vector<Binding<C>>& table, const std::string& name) {
  for (const auto& b : table)
    if (b.key.name == name) return &b;
  return nullptr;
}

// `what`: "key" or "experiment key"; `keysHint`: where the keys are listed.
template <class C>
[[noreturn]] void unknownKey(const std::vector<Binding<C>>& table, const std::string& name,
                             const std::string& where, const std::string& what,
                             const std::string& keysHint) {
  std::vector<std::string> names;
  for (const auto& b : table) names.push_back(b.key.name);
  const std::string close = closestName(name, names);
  throw Error("unknown " + what + " '" + name + "'", where,
              close.empty() ? keysHint : "did you mean '" + close + "'?");
}

// Checks and sets one value; records where it came from in c.origins (for later cross-key
// checks).
template <class C>
void setValue(C& c, const Binding<C>& b, const std::string& text, const std::string& where) {
  const std::string problem = b.key.check(text);
  if (!problem.empty()) throw Error("'" + b.key.name + "' " + problem, where, b.key.help);
  b.set(c, text);
  c.origins[b.key.name] = where;
}

// The scalar text of a YAML value ("" for an empty value), or an error naming the key.
inline std::string scalarText(const YAML::Node& node, const std::string& key, const ConfigKey& info,
                              const std::string& where) {
  if (!node || node.IsNull()) return "";
  if (node.IsScalar()) return node.Scalar();
  throw Error("'" + key + "' must be " + info.typeDescription() + ", not a " +
                  (node.IsMap() ? "map" : "list"),
              where, info.help);
}

// Applies a YAML document. `nested`: keys are grouped in sections (`optim: {lr: ...}` is
// optim.lr, as the run config); otherwise flat (`qat_steps: 200`, as the experiment's).
template <class C>
void applyYaml(C& c, const std::vector<Binding<C>>& table, const std::string& text,
               const std::string& origin, bool nested, const std::string& what,
               const std::string& keysHint) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw Error("invalid YAML: " + e.msg, origin + ":" + std::to_string(e.mark.line + 1),
                "check the indentation and quoting on that line");
  }
  if (!root || root.IsNull()) return;
  const std::function<void(const YAML::Node&, const std::string&)> walk =
      [&](const YAML::Node& node, const std::string& prefix) {
        if (!node.IsMap())
          throw Error(nested ? "expected a map of sections (run, model, data, recipe, quant, "
                               "optim, train, eval)"
                             : "expected a map of key: value",
                      origin + ":" + std::to_string(node.Mark().line + 1));
        for (const auto& kv : node) {
          const std::string where = origin + ":" + std::to_string(kv.first.Mark().line + 1);
          if (!kv.first.IsScalar())
            throw Error(
                "a key must be a name, not a " + std::string(kv.first.IsMap() ? "map" : "list"),
                where);
          const std::string key =
              prefix.empty() ? kv.first.Scalar() : prefix + "." + kv.first.Scalar();
          if (const Binding<C>* b = find(table, key)) {
            setValue(c, *b, scalarText(kv.second, key, b->key, where), where);
            continue;
          }
          bool isSection = false;
          if (nested)
            for (const auto& b : table)
              if (b.key.name.rfind(key + ".", 0) == 0) isSection = true;
          if (isSection && kv.second.IsMap())
            walk(kv.second, key);
          else if (isSection)
            throw Error("'" + key + "' is a section: it holds keys, not a value", where,
                        "e.g. " + key + ": {...}");
          else
            unknownKey(table, key, where, what, keysHint);
        }
      };
  walk(root, "");
}

// One `key=value`. The value is read as a YAML scalar where it is one ("1e-4", "'a b'"); any
// other text is taken as it is (the key's check then judges it).
template <class C>
void applyOverride(C& c, const std::vector<Binding<C>>& table, const std::string& assignment,
                   const std::string& where, const std::string& what, const std::string& keysHint,
                   const std::string& example) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error("'" + assignment + "' is not key=value", where, "e.g. " + example);
  const std::string key = assignment.substr(0, eq), raw = assignment.substr(eq + 1);
  const Binding<C>* b = find(table, key);
  if (!b) unknownKey(table, key, where, what, keysHint);
  std::string text = raw;
  try {
    YAML::Node node = YAML::Load(raw);
    if (node && node.IsScalar()) text = node.Scalar();
  } catch (const YAML::Exception&) {
  }
  setValue(c, *b, text, where);
}

}  // namespace fp4lab::run::keys
