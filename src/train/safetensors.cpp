#include "train/safetensors.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/fs.h"
#include "core/json.h"
#include "train/safetensors_header.h"

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
  const SafetensorsHeader header = parse_safetensors_header(bytes, path);
  SafetensorsFile out;
  out.metadata = header.metadata;
  for (const auto& e : header.tensors) {
    auto t = torch::empty(e.shape, torch::kFloat);
    std::memcpy(t.data_ptr<float>(), bytes.data() + header.data_start + e.begin, e.end - e.begin);
    out.tensors.emplace_back(e.name, t);
  }
  return out;
}

}  // namespace normlab
