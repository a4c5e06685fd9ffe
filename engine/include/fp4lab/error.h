// The one error type the engine throws: what failed, where (file, field, tensor), what to do.
// The CLI prints it and exits with code 2; the GUI shows it and keeps running.
#pragma once

#include <stdexcept>
#include <string>

namespace fp4lab {

class Error : public std::runtime_error {
 public:
  Error(std::string what, std::string where = {}, std::string hint = {})
      : std::runtime_error(compose(what, where, hint)),
        m_what(std::move(what)),
        m_where(std::move(where)),
        m_hint(std::move(hint)) {}

  const std::string& problem() const { return m_what; }
  const std::string& where() const { return m_where; }
  const std::string& hint() const { return m_hint; }

 private:
  static std::string compose(const std::string& what, const std::string& where,
                             const std::string& hint) {
    std::string s = where.empty() ? what : where + ": " + what;
    if (!hint.empty()) s += " (" + hint + ")";
    return s;
  }
  std::string m_what, m_where, m_hint;
};

}  // namespace fp4lab
