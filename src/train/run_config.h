// The one entry point from a config file to a checked, resolved Config: parse, value rules,
// registry names, data files. Every problem is reported at once (ConfigError, exit 2) before
// anything runs or is written.
#pragma once

#include <string>
#include <vector>

#include "config/load.h"

namespace normlab {

Config load_run_config(const std::string& path, const std::vector<std::string>& overrides);

// Same checks for a config already in memory (e.g. from a checkpoint), named `name` in errors.
Config check_and_resolve(LoadedConfig loaded, bool check_data_files);

}  // namespace normlab
