#include "train/safetensors_header.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/errors.h"

namespace normlab {

SafetensorsHeader parse_safetensors_header(std::string_view bytes, const std::string& path) {
  auto fail = [&](const std::string& why) { return RuntimeFailure(path + ": not a valid safetensors file: " + why); };
  if (bytes.size() < 8) throw fail("shorter than 8 bytes");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > bytes.size() - 8) throw fail("header length beyond end of file");
  const size_t data_start = 8 + n;
  YAML::Node header;
  try {
    header = YAML::Load(std::string(bytes.substr(8, n)));
  } catch (const YAML::Exception& e) {
    throw fail("header is not JSON (" + e.msg + ")");
  }
  if (!header.IsMap()) throw fail("header is not a JSON object");
  SafetensorsHeader out;
  out.data_start = data_start;
  struct Range {
    size_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  try {
    for (const auto& kv : header) {
      const std::string name = kv.first.as<std::string>();
      if (name == "__metadata__") {
        for (const auto& m : kv.second) out.metadata[m.first.as<std::string>()] = m.second.as<std::string>();
        continue;
      }
      const auto& info = kv.second;
      if (!info.IsMap()) throw fail(name + " has no dtype/shape/data_offsets");
      if (info["dtype"].as<std::string>() != "F32") throw fail(name + " is not F32");
      std::vector<int64_t> shape;
      double numel = 1;  // in doubles: a hostile shape must not overflow before it is rejected
      for (const auto& d : info["shape"]) {
        const int64_t v = d.as<int64_t>();
        if (v < 0) throw fail(name + " has a negative dimension");
        shape.push_back(v);
        numel *= static_cast<double>(v);
      }
      const auto& offsets = info["data_offsets"];
      if (!offsets.IsSequence() || offsets.size() != 2) throw fail(name + " has bad data_offsets");
      const size_t begin = offsets[0].as<size_t>();
      const size_t end = offsets[1].as<size_t>();
      if (end < begin || end > bytes.size() - data_start ||
          static_cast<double>(end - begin) != numel * sizeof(float)) {
        throw fail(name + " has bad data_offsets");
      }
      out.tensors.push_back({name, shape, begin, end});
      ranges.push_back({begin, end, name});
    }
  } catch (const YAML::Exception& e) {
    throw fail(e.msg);
  }
  // The format's rule: the tensors' byte ranges tile the data, no overlap and no hole.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  size_t at = 0;
  for (const auto& r : ranges) {
    if (r.begin < at) throw fail(r.name + "'s data_offsets overlap another tensor's");
    if (r.begin > at) throw fail(fmt::format("bytes {}..{} of the data belong to no tensor", at, r.begin));
    at = r.end;
  }
  if (at != bytes.size() - data_start) throw fail(fmt::format("bytes {}.. of the data belong to no tensor", at));
  return out;
}

}  // namespace normlab
