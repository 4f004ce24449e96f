#include "train/checkpoint.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <algorithm>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/crash_point.h"
#include "core/errors.h"
#include "core/fs.h"
#include "core/json.h"

namespace normlab {
namespace fs = std::filesystem;

std::string checkpoint_name(int64_t step) { return fmt::format("step_{:08d}", step); }

NamedTensors model_tensors(Transformer& model) {
  NamedTensors out;
  for (const auto& kv : model->named_parameters()) out.emplace_back(kv.key(), kv.value());
  for (const auto& kv : model->named_buffers()) out.emplace_back(kv.key(), kv.value());
  return out;
}

std::string torch_rng_state_hex() {
  auto state = at::detail::getDefaultCPUGenerator().get_state();
  const auto* p = state.data_ptr<uint8_t>();
  std::string hex;
  hex.reserve(state.numel() * 2);
  for (int64_t i = 0; i < state.numel(); ++i) hex += fmt::format("{:02x}", p[i]);
  return hex;
}

namespace {

// "" when hex can be the state of torch's CPU generator, else why not.
std::string rng_hex_problem(const std::string& hex) {
  const size_t expected = static_cast<size_t>(at::detail::getDefaultCPUGenerator().get_state().numel()) * 2;
  if (hex.size() != expected || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
    return fmt::format("RNG state: expected {} hex digits, got {} characters{}", expected, hex.size(),
                       hex.size() == expected ? " that are not all hex" : "");
  }
  return "";
}

}  // namespace

void set_torch_rng_state_hex(const std::string& hex) {
  if (const std::string why = rng_hex_problem(hex); !why.empty()) throw RuntimeFailure(why);
  auto state = torch::empty({static_cast<int64_t>(hex.size() / 2)}, torch::kUInt8);
  auto* p = state.data_ptr<uint8_t>();
  for (size_t i = 0; i + 1 < hex.size(); i += 2) p[i / 2] = static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16));
  auto gen = at::detail::getDefaultCPUGenerator();
  try {
    gen.set_state(state);
  } catch (const c10::Error& e) {
    throw RuntimeFailure("RNG state rejected: " + e.msg());
  }
}

void save_checkpoint(const std::string& out_dir, Transformer& model, const Optimizer* optimizer,
                     const TrainState& st, const std::string& config_yaml,
                     const std::map<std::string, std::string>& metadata) {
  for (const auto& [name, t] : model_tensors(model)) {
    if (!torch::isfinite(t).all().item<bool>()) {
      throw RuntimeFailure("refusing to save " + checkpoint_name(st.step) + ": " + name + " is not finite");
    }
  }
  const fs::path root = fs::path(out_dir) / "checkpoints";
  fs::create_directories(root);
  const std::string name = checkpoint_name(st.step);
  const fs::path tmp = root / fmt::format(".{}.tmp", name);
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  write_file_atomic((tmp / "model.safetensors").string(),
                    safetensors_bytes(model_tensors(model), [&] {
                      auto m = metadata;
                      m["format"] = "normlab";
                      m["config"] = config_yaml;
                      return m;
                    }()));
  if (optimizer) {
    write_file_atomic((tmp / "trainer.safetensors").string(),
                      safetensors_bytes(optimizer->state(), {{"format", "normlab"}}));
  }
  JsonObject state;
  state.add("step", st.step)
      .add("optimizer_steps", optimizer ? optimizer->steps_taken() : int64_t{0})
      .add("data", JsonObject().add("micro_batches", st.micro_batches).add("tokens", st.tokens))
      .add("best_val", st.best_val)
      .add("elapsed_s", st.elapsed_s)
      .add("rng", JsonObject().add("torch_cpu", st.torch_rng))
      .add("skipped", st.skipped)
      .add("world_size", st.world_size);
  if (st.loss_scale > 0) {
    state.add("loss_scale", JsonObject().add("scale", st.loss_scale).add("good_steps", st.loss_scale_good_steps));
  }
  std::string layers = "[";
  for (size_t i = 0; i < st.spike_layers.size(); ++i) {
    layers += (i ? "," : "") + JsonObject().add("v", st.spike_layers[i]).str();
  }
  layers += "]";
  state.add("spike", JsonObject().add("loss", st.spike_loss).add("grad_norm", st.spike_grad_norm).add_raw("layers", layers));
  write_file_atomic((tmp / "state.json").string(), state.str() + "\n");
  // A re-save of the same step (a stop right after a checkpoint, a resume that stops at once)
  // swaps the complete new directory in, so LATEST never names a missing or partial one.
  crash_point("checkpoint.before_swap");
  replace_directory(tmp.string(), (root / name).string());
  crash_point("checkpoint.before_latest");
  write_file_atomic((root / "LATEST").string(), name + "\n");
}

std::vector<int64_t> checkpoint_steps(const std::string& run_dir) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  std::vector<int64_t> steps;
  if (!fs::is_directory(root)) return steps;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (!e.is_directory() || n.size() != 13 || n.rfind("step_", 0) != 0) continue;
    if (n.find_first_not_of("0123456789", 5) == std::string::npos) steps.push_back(std::stoll(n.substr(5)));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string find_checkpoint(const std::string& run_dir, std::optional<int64_t> step) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  if (!fs::is_directory(run_dir)) throw UsageError(run_dir + ": run directory not found");
  std::set<std::string> have;
  for (int64_t s : checkpoint_steps(run_dir)) have.insert(checkpoint_name(s));
  std::string name;
  if (step) {
    name = checkpoint_name(*step);
  } else {
    const fs::path latest = root / "LATEST";
    if (!file_exists(latest.string())) throw UsageError(run_dir + ": no checkpoint (checkpoints/LATEST missing)");
    name = read_file(latest.string());
    while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  }
  if (!have.count(name)) {
    std::string list;
    for (const auto& h : have) list += (list.empty() ? "" : ", ") + h;
    throw UsageError(fmt::format("{}: no checkpoint {}; available: {}", run_dir, name,
                                 list.empty() ? "none" : list));
  }
  return (root / name).string();
}

void load_model_weights(const std::string& ckpt_dir, Transformer& model) {
  const std::string path = (fs::path(ckpt_dir) / "model.safetensors").string();
  auto file = read_safetensors(path);
  std::map<std::string, torch::Tensor> by_name(file.tensors.begin(), file.tensors.end());
  torch::NoGradGuard ng;
  auto mine = model_tensors(model);
  for (auto& [name, t] : mine) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw RuntimeFailure(path + ": missing tensor " + name);
    if (!it->second.sizes().equals(t.sizes())) {
      throw RuntimeFailure(fmt::format("{}: tensor {} has shape {} but the config gives {}", path, name,
                                       fmt::join(it->second.sizes(), "x"), fmt::join(t.sizes(), "x")));
    }
    if (!torch::isfinite(it->second).all().item<bool>()) {
      throw RuntimeFailure(path + ": tensor " + name + " holds NaN or infinite values");
    }
    t.copy_(it->second);
    by_name.erase(it);
  }
  if (!by_name.empty()) throw RuntimeFailure(path + ": unexpected tensor " + by_name.begin()->first);
}

std::string checkpoint_config(const std::string& ckpt_dir) {
  const std::string path = (fs::path(ckpt_dir) / "model.safetensors").string();
  auto file = read_safetensors(path);
  auto it = file.metadata.find("config");
  if (it == file.metadata.end()) throw RuntimeFailure(path + ": no config in __metadata__");
  return it->second;
}

std::map<std::string, std::string> checkpoint_metadata(const std::string& ckpt_dir) {
  return read_safetensors((fs::path(ckpt_dir) / "model.safetensors").string()).metadata;
}

int64_t checkpoint_world_size(const std::string& ckpt_dir) {
  const std::string state_path = (fs::path(ckpt_dir) / "state.json").string();
  try {
    YAML::Node s = YAML::Load(read_file(state_path));
    const int64_t w = s["world_size"] ? s["world_size"].as<int64_t>() : 1;
    if (w < 1) throw RuntimeFailure(fmt::format("{}: world_size {} must be >= 1", state_path, w));
    return w;
  } catch (const YAML::Exception& e) {
    throw RuntimeFailure(state_path + ": unreadable (" + e.msg + ")");
  }
}

void load_trainer_state(const std::string& ckpt_dir, Optimizer& optimizer, TrainState& st) {
  const std::string state_path = (fs::path(ckpt_dir) / "state.json").string();
  try {
    YAML::Node s = YAML::Load(read_file(state_path));
    st.step = s["step"].as<int64_t>();
    st.micro_batches = s["data"]["micro_batches"].as<int64_t>();
    st.tokens = s["data"]["tokens"].as<int64_t>();
    st.best_val = s["best_val"].IsNull() ? std::nan("") : s["best_val"].as<double>();
    st.elapsed_s = s["elapsed_s"].as<double>();
    st.torch_rng = s["rng"]["torch_cpu"].as<std::string>();
    st.skipped = s["skipped"].as<int64_t>();
    st.world_size = s["world_size"] ? s["world_size"].as<int64_t>() : 1;
    st.loss_scale = 0;
    st.loss_scale_good_steps = 0;
    if (s["loss_scale"]) {  // fp16 runs only
      st.loss_scale = s["loss_scale"]["scale"].as<double>();
      st.loss_scale_good_steps = s["loss_scale"]["good_steps"].as<int64_t>();
    }
    auto vec = [](const YAML::Node& n) {
      std::vector<double> v;
      for (const auto& x : n) v.push_back(x.as<double>());
      return v;
    };
    st.spike_loss = vec(s["spike"]["loss"]);
    st.spike_grad_norm = vec(s["spike"]["grad_norm"]);
    st.spike_layers.clear();
    for (const auto& l : s["spike"]["layers"]) st.spike_layers.push_back(vec(l["v"]));
    const int64_t optimizer_steps = s["optimizer_steps"].as<int64_t>();
    // Values a resume acts on: a wrong one would name a bad checkpoint or shift the data order.
    auto bad = [&](const std::string& what) { return RuntimeFailure(state_path + ": " + what); };
    if (st.step < 0) throw bad(fmt::format("step {} is negative", st.step));
    if (st.micro_batches < 0) throw bad(fmt::format("data.micro_batches {} is negative", st.micro_batches));
    if (st.tokens < 0) throw bad(fmt::format("data.tokens {} is negative", st.tokens));
    if (st.skipped < 0 || st.skipped > st.step) {
      throw bad(fmt::format("skipped {} is not in [0, step {}]", st.skipped, st.step));
    }
    if (optimizer_steps < 0 || optimizer_steps > st.step) {
      throw bad(fmt::format("optimizer_steps {} is not in [0, step {}]", optimizer_steps, st.step));
    }
    if (!(st.elapsed_s >= 0) || !std::isfinite(st.elapsed_s)) throw bad("elapsed_s is not a finite number >= 0");
    if (!(st.loss_scale >= 0) || !std::isfinite(st.loss_scale) || st.loss_scale_good_steps < 0) {
      throw bad("loss_scale must hold a finite scale >= 0 and good_steps >= 0");
    }
    const std::string expected = checkpoint_name(st.step), here = fs::path(ckpt_dir).filename().string();
    if (here.rfind("step_", 0) == 0 && here != expected) {
      throw bad(fmt::format("step {} does not match the directory {}", st.step, here));
    }
    if (const std::string why = rng_hex_problem(st.torch_rng); !why.empty()) throw bad(why);
    for (const auto* w : {&st.spike_loss, &st.spike_grad_norm}) {
      for (double v : *w) {
        if (!std::isfinite(v)) throw bad("a spike baseline holds a non-finite value");
      }
    }
    auto opt = read_safetensors((fs::path(ckpt_dir) / "trainer.safetensors").string());
    optimizer.load_state(opt.tensors, optimizer_steps);
  } catch (const YAML::Exception& e) {
    throw RuntimeFailure(state_path + ": unreadable (" + e.msg + ")");
  }
}

}  // namespace normlab
