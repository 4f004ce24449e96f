// Serialised TensorBoard Event messages (tensorboard.proto). The one file that includes the
// protobuf-generated code, compiled apart from LibTorch's headers (a pip LibTorch ships protobuf
// 3.13 headers of its own, which Debian's 3.21 protoc output does not compile against); this
// header names no protobuf type.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace normlab {

// The first event of every event file: file_version "brain.Event:2".
std::string tb_file_version_event(double wall_time);
// One event at `step` holding each (tag, value) as a float simple_value.
std::string tb_scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& scalars);

}  // namespace normlab
