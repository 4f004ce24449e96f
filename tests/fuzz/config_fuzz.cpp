// libFuzzer target for the config loader: YAML text plus `--set` lines, as `normlab train` reads
// them. Input: the YAML, then optionally a line "%%" followed by one override per line. The
// loader may only answer with ConfigError or UsageError (exit 2); any other exception, a crash or
// a sanitizer report is a finding. Built and run by tests/fuzz/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "config/load.h"
#include "core/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::string yaml = input;
  std::vector<std::string> sets;
  if (const auto sep = input.find("\n%%\n"); sep != std::string::npos) {
    yaml = input.substr(0, sep);
    std::istringstream lines(input.substr(sep + 4));
    std::string line;
    while (std::getline(lines, line)) sets.push_back(line);
  }
  try {
    normlab::LoadedConfig loaded = normlab::parse_config_text(yaml, "fuzz.yaml", sets, /*collect=*/true);
    normlab::Problems problems(loaded.source);
    problems.add_earlier(loaded.problems, loaded.problem_keys);
    normlab::validate_config(loaded.config, problems);
    if (problems.empty()) {
      // A config that passes must dump to YAML that loads back to the same config.
      const std::string dumped = normlab::dump_config(loaded.config);
      if (normlab::dump_config(normlab::parse_config_text(dumped, "dumped.yaml").config) != dumped) {
        __builtin_trap();
      }
    }
  } catch (const normlab::UsageError&) {  // ConfigError included
  }
  return 0;
}
