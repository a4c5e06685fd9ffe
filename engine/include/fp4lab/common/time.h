// UTC timestamps as fp4lab writes them everywhere (status.json, the log, folder names).
#pragma once

#include <string>

namespace fp4lab {

// "2026-12-01T20:03:32Z", or with milliseconds "2026-12-01T20:03:32.416Z".
std::string utcTimestamp(bool milliseconds = false);
// "20261201-200332", for folder names.
std::string utcCompactTimestamp();

}  // namespace fp4lab
