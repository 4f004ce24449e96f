#include "metrics/report.h"

#include "metrics/spike.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "config/load.h"
#include "core/errors.h"
#include "core/fs.h"
#include "core/json.h"
#include "data/corpus.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;

std::vector<double> vec(const YAML::Node& n) {
  std::vector<double> v;
  if (n && n.IsSequence()) {
    for (const auto& x : n) v.push_back(x.IsNull() ? std::nan("") : x.as<double>());
  }
  return v;
}
double num(const YAML::Node& n) { return (!n || n.IsNull()) ? std::nan("") : n.as<double>(); }

struct Profile {
  int64_t step;
  std::vector<double> blocks;
  double embed, head;
};

struct Spike {
  int64_t step;
  std::string metric, action;
  double value, z;
};

struct Summary {
  std::string run, layout, norm;
  int64_t n_layers = 0, d_model = 0, last_step = -1, tokens = 0, skipped = 0, nonfinite = 0;
  double final_train = std::nan(""), final_val = std::nan(""), best_val = std::nan(""), floor = std::nan("");
  int64_t best_val_step = -1, final_val_step = -1;
  std::vector<Spike> spikes;
  std::vector<Profile> profiles;  // first, middle, last logged
  std::vector<std::string> warnings;
  double spike_score = std::nan("");  // MODEL.md section 9
  double eff_rank = std::nan("");     // of the last eval record that has it
  // The last full-diagnostics record's per-layer values (empty where the run has none).
  int64_t diag_step = -1;
  std::vector<double> block_cos, attn_sink, act_rms, act_max;
};

Summary summarise(const std::string& run_dir) {
  const fs::path run(run_dir);
  const std::string metrics = (run / "metrics.jsonl").string();
  if (!fs::is_directory(run)) throw UsageError(run_dir + ": run directory not found");
  if (!file_exists(metrics)) throw UsageError(run_dir + ": no metrics.jsonl (not a NormLab run?)");
  Summary s;
  s.run = run_dir;
  const std::string cfg_path = (run / "config.yaml").string();
  std::string val_path;
  double zscore = DiagConfig{}.spike.zscore;
  if (file_exists(cfg_path)) {
    Config c = parse_config_file(cfg_path).config;
    zscore = c.diag.spike.zscore;
    s.layout = c.model.layout;
    s.norm = c.model.norm.type;
    s.n_layers = c.model.n_layers;
    s.d_model = c.model.d_model;
    val_path = c.data.val;
  }
  if (auto f = read_entropy_floor(val_path)) s.floor = f->floor;

  std::vector<Profile> all;
  std::vector<std::pair<int64_t, std::vector<double>>> entropy, logit_max;
  SpikeScore score(zscore);
  for (YAML::Node r : read_json_lines(metrics)) {  // non-const: a missing key gives an empty node
    if (!r["kind"] || !r["step"]) continue;
    const std::string kind = r["kind"].as<std::string>();
    const int64_t step = r["step"].as<int64_t>();
    if (kind == "train") {
      if (r["skipped"] && r["skipped"].as<bool>()) {
        ++s.skipped;
        if (r["nonfinite"]) ++s.nonfinite;
        continue;
      }
      s.last_step = step;
      s.final_train = num(r["loss"]);
      if (r["tokens"]) s.tokens = r["tokens"].as<int64_t>();
      const auto& layers = r["layers"];
      if (layers && layers["grad_norm"]) {
        all.push_back({step, vec(layers["grad_norm"]), num(r["grad_norm_embed"]), num(r["grad_norm_head"])});
      }
      if (layers && layers["attn_entropy"]) entropy.emplace_back(step, vec(layers["attn_entropy"]));
      if (layers && layers["attn_logit_max"]) logit_max.emplace_back(step, vec(layers["attn_logit_max"]));
      score.add(num(r["loss_z"]), num(r["grad_norm_z"]));
      if (layers && layers["block_cos"]) {
        s.diag_step = step;
        s.block_cos = vec(layers["block_cos"]);
        s.attn_sink = layers["attn_sink"] ? vec(layers["attn_sink"]) : std::vector<double>{};
        s.act_rms = layers["act_rms"] ? vec(layers["act_rms"]) : std::vector<double>{};
        s.act_max = layers["act_max"] ? vec(layers["act_max"]) : std::vector<double>{};
      }
    } else if (kind == "eval") {
      const double v = num(r["val_loss"]);
      if (r["eff_rank"]) s.eff_rank = num(r["eff_rank"]);
      s.final_val = v;
      s.final_val_step = step;
      if (std::isfinite(v) && (std::isnan(s.best_val) || v < s.best_val)) {
        s.best_val = v;
        s.best_val_step = step;
      }
    } else if (kind == "spike") {
      s.spikes.push_back({step, r["metric"].as<std::string>(), r["action"].as<std::string>(), num(r["value"]), num(r["z"])});
    }
  }
  s.spike_score = score.value();
  if (!all.empty()) {
    s.profiles.push_back(all.front());
    if (all.size() > 2) s.profiles.push_back(all[all.size() / 2]);
    if (all.size() > 1) s.profiles.push_back(all.back());
  }
  if (!entropy.empty()) {
    const auto& [step, last] = entropy.back();
    const auto& first = entropy.front().second;
    for (size_t i = 0; i < last.size(); ++i) {
      if (last[i] < kEntropyCollapseNats) {
        s.warnings.push_back(fmt::format(
            "attention entropy collapse in blocks.{}: {:.3f} nats at step {} (was {:.3f} at step {}); "
            "its heads attend to a single position", i, last[i], step, first[i], entropy.front().first));
      }
    }
  }
  if (logit_max.size() > 2) {
    const auto& [s0, first] = logit_max[logit_max.size() / 2];
    const auto& [s1, last] = logit_max.back();
    for (size_t i = 0; i < last.size() && i < first.size(); ++i) {
      if (last[i] > kLogitGrowthFloor && last[i] > kLogitGrowthFactor * first[i]) {
        s.warnings.push_back(fmt::format(
            "growing attention logits in blocks.{}: max {:.1f} at step {} (was {:.2f} at step {}); "
            "QK-norm or attn_softcap bound them", i, last[i], s1, first[i], s0));
      }
    }
  }
  return s;
}

std::string excess(double v, double floor) {
  return std::isfinite(floor) && std::isfinite(v) ? fmt::format(" (excess over floor {:.4f})", v - floor) : "";
}

}  // namespace

std::string report_text(const std::string& run_dir) {
  const Summary s = summarise(run_dir);
  std::string o;
  o += fmt::format("run         {}\n", s.run);
  if (!s.layout.empty()) o += fmt::format("model       layout {}, norm {}, L={}, d={}\n", s.layout, s.norm, s.n_layers, s.d_model);
  o += fmt::format("progress    last logged step {}, {} tokens, {} skipped updates ({} non-finite)\n", s.last_step,
                   s.tokens, s.skipped, s.nonfinite);
  if (std::isfinite(s.floor)) o += fmt::format("floor       {:.4f} nats/token (val entropy floor)\n", s.floor);
  o += fmt::format("train loss  {:.4f} at the last logged step\n", s.final_train);
  o += fmt::format("val loss    final {:.4f} at step {}{}\n", s.final_val, s.final_val_step, excess(s.final_val, s.floor));
  o += fmt::format("            best  {:.4f} at step {}{}\n", s.best_val, s.best_val_step, excess(s.best_val, s.floor));
  o += fmt::format("spikes      {}\n", s.spikes.size());
  for (size_t i = 0; i < s.spikes.size() && i < 10; ++i) {
    const auto& p = s.spikes[i];
    o += fmt::format("            step {:>6}  {:<9} {:.4g}  z {:.1f}  -> {}\n", p.step, p.metric, p.value, p.z, p.action);
  }
  if (s.spikes.size() > 10) o += fmt::format("            ... {} more\n", s.spikes.size() - 10);
  o += fmt::format("spike score {:.4f} (share of logged steps with loss or grad-norm z above the threshold)\n",
                   s.spike_score);
  if (std::isfinite(s.eff_rank)) o += fmt::format("eff. rank   {:.2f} (head input states, last eval)\n", s.eff_rank);
  if (!s.block_cos.empty()) {
    o += fmt::format("\nper-layer diagnostics at step {} (block_cos near 1: the block barely changes the stream)\n",
                     s.diag_step);
    o += fmt::format("{:<12}{:>12}{:>12}{:>12}{:>12}\n", "layer", "block_cos", "attn_sink", "act_rms in", "act_max in");
    auto at = [](const std::vector<double>& v, size_t i) { return i < v.size() ? v[i] : std::nan(""); };
    for (size_t i = 0; i < s.block_cos.size(); ++i) {
      o += fmt::format("{:<12}{:>12.4f}{:>12.4f}{:>12.4g}{:>12.4g}\n", fmt::format("blocks.{}", i), s.block_cos[i],
                       at(s.attn_sink, i), at(s.act_rms, i), at(s.act_max, i));
    }
  }
  if (!s.profiles.empty()) {
    o += "\nper-layer gradient norm (before clipping)\n";
    o += fmt::format("{:<12}", "layer");
    for (const auto& p : s.profiles) o += fmt::format("{:>14}", fmt::format("step {}", p.step));
    o += "\n";
    auto row = [&](const std::string& name, auto get) {
      o += fmt::format("{:<12}", name);
      for (const auto& p : s.profiles) o += fmt::format("{:>14.4g}", get(p));
      o += "\n";
    };
    row("embed", [](const Profile& p) { return p.embed; });
    for (size_t i = 0; i < s.profiles[0].blocks.size(); ++i) {
      row(fmt::format("blocks.{}", i), [i](const Profile& p) { return i < p.blocks.size() ? p.blocks[i] : std::nan(""); });
    }
    row("head", [](const Profile& p) { return p.head; });
    row("first/last", [](const Profile& p) { return p.blocks.empty() ? std::nan("") : p.blocks.front() / p.blocks.back(); });
  }
  o += "\n";
  if (s.warnings.empty()) o += "warnings    none\n";
  for (const auto& w : s.warnings) o += "warning: " + w + "\n";
  return o;
}

std::string report_json(const std::string& run_dir) {
  const Summary s = summarise(run_dir);
  std::string spikes = "[", profiles = "[", warnings = "[";
  for (size_t i = 0; i < s.spikes.size(); ++i) {
    const auto& p = s.spikes[i];
    spikes += (i ? "," : "") + JsonObject().add("step", p.step).add("metric", p.metric).add("value", p.value)
                                    .add("z", p.z).add("action", p.action).str();
  }
  for (size_t i = 0; i < s.profiles.size(); ++i) {
    const auto& p = s.profiles[i];
    profiles += (i ? "," : "") + JsonObject().add("step", p.step).add("grad_norm", p.blocks).add("grad_norm_embed", p.embed)
                                      .add("grad_norm_head", p.head).str();
  }
  for (size_t i = 0; i < s.warnings.size(); ++i) warnings += (i ? "," : "") + json_quote(s.warnings[i]);
  JsonObject j;
  j.add("run", s.run).add("layout", s.layout).add("norm", s.norm).add("n_layers", s.n_layers)
      .add("last_step", s.last_step).add("tokens", s.tokens).add("skipped", s.skipped).add("nonfinite", s.nonfinite)
      .add("entropy_floor", s.floor).add("final_train_loss", s.final_train).add("final_val_loss", s.final_val)
      .add("final_val_step", s.final_val_step).add("best_val_loss", s.best_val).add("best_val_step", s.best_val_step)
      .add("best_val_excess", s.best_val - s.floor).add("spike_score", s.spike_score).add("eff_rank", s.eff_rank)
      .add("block_cos", s.block_cos).add("attn_sink", s.attn_sink).add("act_max", s.act_max)
      .add_raw("spikes", spikes + "]")
      .add_raw("grad_norm_profiles", profiles + "]").add_raw("warnings", warnings + "]");
  return j.str() + "\n";
}

}  // namespace normlab
