#include "train/safetensors.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/fs.h"
#include "core/json.h"

namespace normlab {

std::string safetensors_bytes(const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");
  std::string header = "{";
  JsonObject meta;
  for (const auto& [k, v] : metadata) meta.add(k, v);
  header += json_quote("__metadata__") + ":" + meta.str();
  std::vector<torch::Tensor> data;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    auto c = t.detach().to(torch::kCPU, torch::kFloat).contiguous();
    const size_t nbytes = static_cast<size_t>(c.numel()) * sizeof(float);
    std::string shape;
    for (int64_t d = 0; d < c.dim(); ++d) shape += (d ? "," : "") + std::to_string(c.size(d));
    header += fmt::format(",{}:{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                          json_quote(name), shape, offset, offset + nbytes);
    offset += nbytes;
    data.push_back(c);
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';  // aligns the data, as the reference writer does
  std::string out;
  out.reserve(8 + header.size() + offset);
  const uint64_t n = header.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out += header;
  for (const auto& c : data) {
    out.append(reinterpret_cast<const char*>(c.data_ptr<float>()), c.numel() * sizeof(float));
  }
  return out;
}

SafetensorsFile read_safetensors(const std::string& path) {
  const std::string bytes = read_file(path);
  auto fail = [&](const std::string& why) { return RuntimeFailure(path + ": not a valid safetensors file: " + why); };
  if (bytes.size() < 8) throw fail("shorter than 8 bytes");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > bytes.size() - 8) throw fail("header length beyond end of file");
  const size_t data_start = 8 + n;
  YAML::Node header;
  try {
    header = YAML::Load(bytes.substr(8, n));
  } catch (const YAML::Exception& e) {
    throw fail("header is not JSON (" + e.msg + ")");
  }
  if (!header.IsMap()) throw fail("header is not a JSON object");
  SafetensorsFile out;
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
      auto t = torch::empty(shape, torch::kFloat);
      std::memcpy(t.data_ptr<float>(), bytes.data() + data_start + begin, end - begin);
      out.tensors.emplace_back(name, t);
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
