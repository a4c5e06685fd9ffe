// The one glob matcher of module names: the recipes' quant.include / quant.exclude, the
// exporter's --exclude and fp4lab analyze's --include / --exclude all select layers with it.
#pragma once

#include <string>

namespace fp4lab {

// fnmatch-like: '*' any run of characters (dots included), '?' one character, [...] a class
// ('!' or '^' negates it).
bool globMatch(const std::string& pattern, const std::string& name);

}  // namespace fp4lab
