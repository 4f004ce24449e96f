#include "metrics/tensorboard_event.h"

#include "tensorboard.pb.h"

namespace normlab {

std::string tb_file_version_event(double wall_time) {
  tb::Event e;
  e.set_wall_time(wall_time);
  e.set_file_version("brain.Event:2");
  return e.SerializeAsString();
}

std::string tb_scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  tb::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  tb::Summary* s = e.mutable_summary();
  for (const auto& [tag, v] : scalars) {
    tb::SummaryValue* sv = s->add_value();
    sv->set_tag(tag);
    sv->set_simple_value(static_cast<float>(v));
  }
  return e.SerializeAsString();
}

}  // namespace normlab
