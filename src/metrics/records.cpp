#include "metrics/records.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <initializer_list>

#include "config/config.h"
#include "core/errors.h"
#include "core/fs.h"
#include "core/json.h"
#include "data/corpus.h"
#include "metrics/spike.h"
#include "metrics/stats.h"

namespace normlab {
namespace {
namespace fs = std::filesystem;



bool flag(const YAML::Node& n) {
  if (!n || !n.IsScalar()) return false;
  try {
    return n.as<bool>();
  } catch (const YAML::Exception&) {
    return false;
  }
}

std::vector<double> vec(const YAML::Node& n) {
  std::vector<double> v;
  if (n && n.IsSequence()) {
    for (const auto& x : n) v.push_back(json_number_or_nan(x));
  }
  return v;
}

bool integer(const YAML::Node& n, int64_t& out) {
  if (!n || !n.IsScalar()) return false;
  try {
    out = n.as<int64_t>();
    return true;
  } catch (const YAML::Exception&) {
    return false;
  }
}

TrainRecord parse_train(const YAML::Node& r, int64_t step) {
  TrainRecord t;
  t.step = step;
  t.loss = json_number_or_nan(r["loss"]);
  t.lr = json_number_or_nan(r["lr"]);
  t.grad_norm = json_number_or_nan(r["grad_norm"]);
  t.loss_scale = json_number_or_nan(r["loss_scale"]);
  t.loss_z = json_number_or_nan(r["loss_z"]);
  t.grad_norm_z = json_number_or_nan(r["grad_norm_z"]);
  integer(r["tokens"], t.tokens);
  t.skipped = flag(r["skipped"]);
  t.overflow = flag(r["overflow"]);
  t.nonfinite = flag(r["nonfinite"]);
  t.applied = static_cast<bool>(r["tok_per_s"]);
  t.tok_per_s = json_number_or_nan(r["tok_per_s"]);
  t.param_norm = json_number_or_nan(r["param_norm"]);
  t.grad_noise_scale = json_number_or_nan(r["grad_noise_scale"]);
  integer(r["qk_clipped"], t.qk_clipped);
  t.grad_norm_embed = json_number_or_nan(r["grad_norm_embed"]);
  t.grad_norm_head = json_number_or_nan(r["grad_norm_head"]);
  t.logit_max = json_number_or_nan(r["logit_max"]);
  t.lse_mean = json_number_or_nan(r["lse_mean"]);
  const YAML::Node params = r["params"];
  if (params && params.IsMap()) {
    for (auto it = params.begin(); it != params.end(); ++it) t.params.emplace_back(it->first.as<std::string>(), json_number_or_nan(it->second));
  }
  const YAML::Node layers = r["layers"];
  if (layers && layers.IsMap()) {
    for (auto it = layers.begin(); it != layers.end(); ++it) {
      if (it->second.IsSequence()) t.layers.emplace_back(it->first.as<std::string>(), vec(it->second));
    }
  }
  // depth_weights; runs written before the key was named for what it is call it attnres_weights.
  const YAML::Node depth = r["depth_weights"] ? r["depth_weights"] : r["attnres_weights"];
  if (depth && depth.IsMap()) {
    for (auto it = depth.begin(); it != depth.end(); ++it) {
      if (it->second.IsSequence()) t.depth_weights.emplace_back(it->first.as<std::string>(), vec(it->second));
    }
  }
  return t;
}

// node[k0][k1]..., an empty node where a level is missing (yaml-cpp throws on a missing level).
YAML::Node lookup(const YAML::Node& node, const char* const* k, const char* const* end) {
  if (k == end) return node;
  if (!node || !node.IsMap() || !node[*k]) return YAML::Node();
  return lookup(node[*k], k + 1, end);
}

// A run's config.yaml is the resolved config the run wrote (src/train/README.md): the few facts the
// derivations need are read from it as written, so a run directory stays readable when it is moved
// away from its data or read by a binary whose config keys differ.
RunInfo read_info(const std::string& path) {
  RunInfo info;
  info.spike_zscore = SpikeConfig{}.zscore;
  if (!file_exists(path)) return info;
  try {
    const YAML::Node c = YAML::LoadFile(path);
    // c[a][b]..., an empty node where a level is missing (yaml-cpp throws on a missing level).
    auto at = [&c](std::initializer_list<const char*> keys) { return lookup(c, keys.begin(), keys.end()); };
    auto text = [](const YAML::Node& n) { return n && n.IsScalar() ? n.as<std::string>() : std::string(); };
    info.layout = text(at({"model", "layout"}));
    info.norm = text(at({"model", "norm", "type"}));
    if (const std::string r = text(at({"model", "residual", "type"})); !r.empty()) info.residual = r;
    if (const std::string v = text(at({"model", "value_residual"})); !v.empty()) info.value_residual = v;
    // data.val: one file (a string), or a list whose only entry is it; a stream of several has no floor
    const YAML::Node val = at({"data", "val"});
    info.val_path = val.IsSequence() && val.size() == 1 ? text(val[0]) : text(val);
    const YAML::Node train = at({"data", "train"});
    info.train_path = train.IsSequence() && train.size() == 1 ? text(train[0]) : text(train);
    integer(at({"model", "ctx"}), info.ctx);
    integer(at({"model", "n_layers"}), info.n_layers);
    integer(at({"model", "d_model"}), info.d_model);
    if (const double z = json_number_or_nan(at({"diag", "spike", "zscore"})); std::isfinite(z)) info.spike_zscore = z;
  } catch (const YAML::Exception& e) {
    info.config_error = fmt::format("{}: {}; defaults used", path, e.what());
  }
  return info;
}

void add_warnings(RunRecords& r) {
  RunDerived& d = r.derived;
  if (!r.info.config_error.empty()) d.warnings.push_back(r.info.config_error);
  std::vector<const TrainRecord*> entropy, logit_max;
  for (const auto& t : r.train) {
    if (t.layer("attn_entropy")) entropy.push_back(&t);
    if (t.layer("attn_logit_max")) logit_max.push_back(&t);
  }
  if (!entropy.empty()) {
    const auto& last = *entropy.back()->layer("attn_entropy");
    const auto& first = *entropy.front()->layer("attn_entropy");
    for (size_t i = 0; i < last.size(); ++i) {
      if (last[i] < kEntropyCollapseNats) {
        d.warnings.push_back(fmt::format(
            "attention entropy collapse in blocks.{}: {:.3f} nats at step {} (was {:.3f} at step {}); "
            "its heads attend to a single position",
            i, last[i], entropy.back()->step, i < first.size() ? first[i] : kNaN, entropy.front()->step));
      }
    }
  }
  if (logit_max.size() > 2) {
    const TrainRecord& mid = *logit_max[logit_max.size() / 2];
    const TrainRecord& end = *logit_max.back();
    const auto& first = *mid.layer("attn_logit_max");
    const auto& last = *end.layer("attn_logit_max");
    for (size_t i = 0; i < last.size() && i < first.size(); ++i) {
      if (last[i] > kLogitGrowthFloor && last[i] > kLogitGrowthFactor * first[i]) {
        d.warnings.push_back(fmt::format(
            "growing attention logits in blocks.{}: max {:.1f} at step {} (was {:.2f} at step {}); "
            "QK-norm or attn_softcap bound them",
            i, last[i], end.step, first[i], mid.step));
      }
    }
  }
}

}  // namespace

const std::vector<double>* TrainRecord::layer(const std::string& name) const {
  for (const auto& [n, v] : layers) {
    if (n == name) return &v;
  }
  return nullptr;
}

double GradProfile::first_last() const { return blocks.empty() ? kNaN : blocks.front() / blocks.back(); }

RunRecords read_records(const std::string& metrics_path, const RunInfo& info) {
  RunRecords r;
  r.info = info;
  r.has_metrics = file_exists(metrics_path);
  for (YAML::Node rec : read_json_lines(metrics_path)) {  // non-const: a missing key gives an empty node
    int64_t step = 0;
    if (!rec.IsMap() || !rec["kind"] || !rec["kind"].IsScalar() || !integer(rec["step"], step)) continue;
    const std::string kind = rec["kind"].as<std::string>();
    if (kind == "train") {
      r.train.push_back(parse_train(rec, step));
    } else if (kind == "eval") {
      EvalRecord e;
      e.step = step;
      e.val_loss = json_number_or_nan(rec["val_loss"]);
      e.has_eff_rank = static_cast<bool>(rec["eff_rank"]);
      e.eff_rank = json_number_or_nan(rec["eff_rank"]);
      e.val_excess = json_number_or_nan(rec["val_excess"]);
      e.val_bpb = json_number_or_nan(rec["val_bpb"]);
      if (rec["by_task"] && rec["by_task"].IsMap()) {
        for (const auto& kv : rec["by_task"]) {
          YAML::Node t = kv.second;
          int64_t n = 0;
          if (!kv.first.IsScalar() || !t.IsMap() || !integer(t["tokens"], n)) continue;
          e.by_task[kv.first.as<std::string>()] = {n, json_number_or_nan(t["loss"])};
        }
      }
      r.eval.push_back(e);
    } else if (kind == "spike") {
      SpikeRecord s;
      s.step = step;
      s.metric = rec["metric"] && rec["metric"].IsScalar() ? rec["metric"].as<std::string>() : "";
      s.action = rec["action"] && rec["action"].IsScalar() ? rec["action"].as<std::string>() : "";
      s.value = json_number_or_nan(rec["value"]);
      s.mean = json_number_or_nan(rec["mean"]);
      s.std = json_number_or_nan(rec["std"]);
      s.z = json_number_or_nan(rec["z"]);
      r.spikes.push_back(s);
    }
  }
  derive(r);
  return r;
}

RunRecords read_run_with_records(const std::string& dir) {
  RunRecords r = read_run(dir);
  if (r.train.empty() && r.eval.empty()) {
    throw UsageError(fmt::format("{}/metrics.jsonl: no valid train or eval record (empty, torn or not NormLab's); "
                                 "nothing to read", dir));
  }
  return r;
}

RunRecords read_run(const std::string& dir) {
  const fs::path run(dir);
  if (!fs::is_directory(run)) throw UsageError(dir + ": run directory not found");
  const std::string metrics = (run / "metrics.jsonl").string();
  if (!file_exists(metrics)) throw UsageError(dir + ": no metrics.jsonl (not a NormLab run?)");
  RunRecords r = read_records(metrics, read_info((run / "config.yaml").string()));
  r.dir = dir;
  r.machines = read_machines(dir);
  const fs::path spikes = run / "spikes";
  if (fs::is_directory(spikes)) {
    for (const auto& e : fs::directory_iterator(spikes)) {
      const std::string n = e.path().filename().string();
      if (n.size() < 13 || n.compare(n.size() - 13, 13, ".autopsy.json") != 0) continue;
      try {
        const YAML::Node j = YAML::LoadFile(e.path().string());
        AutopsyRecord a;
        a.step = j["step"].as<int64_t>();
        a.reproducible = j["reproducible"].as<bool>();
        a.loss = json_number_or_nan(j["loss"]);
        a.logged_loss = json_number_or_nan(j["logged_loss"]);
        a.path = e.path().string();
        r.autopsies.push_back(a);
      } catch (const YAML::Exception&) {  // a torn or foreign file: not an autopsy
      }
    }
    std::sort(r.autopsies.begin(), r.autopsies.end(),
              [](const AutopsyRecord& a, const AutopsyRecord& b) { return a.step < b.step; });
  }
  return r;
}

// Every derived number of src/metrics/README.md ("Derived numbers"), in the order of that table.
void derive(RunRecords& r) {
  RunDerived d;
  // Progress: the last train record, skipped or not; skipped updates and the non-finite ones.
  std::vector<double> tok_per_s;
  SpikeScore score(r.info.spike_zscore);
  std::vector<const TrainRecord*> with_profile;
  size_t most_series = 0;
  for (size_t i = 0; i < r.train.size(); ++i) {
    const TrainRecord& t = r.train[i];
    d.last_step = t.step;
    if (t.tokens >= 0) d.tokens = t.tokens;
    if (t.skipped) {
      ++d.skipped;
      if (t.nonfinite) ++d.nonfinite;
    } else {
      d.final_train_loss = t.loss;
      if (t.layer("grad_norm")) with_profile.push_back(&t);
      // The last full-diagnostics record: the last applied one with the most per-layer series.
      if (!t.layers.empty() && t.layers.size() >= most_series) {
        most_series = t.layers.size();
        d.diag_index = static_cast<int64_t>(i);
      }
    }
    // Spike score: every train record, skipped ones included (src/metrics/README.md).
    score.add(t.loss_z, t.grad_norm_z);
    if (std::isfinite(t.grad_norm) && !(d.max_grad_norm >= t.grad_norm)) d.max_grad_norm = t.grad_norm;
    if (std::isfinite(t.tok_per_s)) tok_per_s.push_back(t.tok_per_s);
  }
  d.spike_score = score.value();
  d.tok_per_s = median(tok_per_s);
  d.spikes = static_cast<int64_t>(r.spikes.size());

  // Divergence: a non-finite train record anywhere, or the last train loss (skipped records
  // included) not finite or not below the first.
  if (!r.train.empty()) {
    const bool any_nonfinite =
        std::any_of(r.train.begin(), r.train.end(), [](const TrainRecord& t) { return t.nonfinite; });
    const double first = r.train.front().loss, last = r.train.back().loss;
    d.diverged = any_nonfinite || !std::isfinite(last) || !(last < first) ? 1 : 0;
  }

  // Gradient-norm profiles: first, middle and last applied records with layers.grad_norm.
  auto profile = [](const TrainRecord& t) {
    return GradProfile{t.step, *t.layer("grad_norm"), t.grad_norm_embed, t.grad_norm_head};
  };
  if (!with_profile.empty()) {
    d.profiles.push_back(profile(*with_profile.front()));
    if (with_profile.size() > 2) d.profiles.push_back(profile(*with_profile[with_profile.size() / 2]));
    if (with_profile.size() > 1) d.profiles.push_back(profile(*with_profile.back()));
    d.grad_ratio_first_last = d.profiles.front().first_last();
  }

  // Validation: the entropy floor the run recorded (val_loss - val_excess), else floor.json.
  const EvalRecord* best = nullptr;
  for (const auto& e : r.eval) {
    if (std::isfinite(e.val_loss) && std::isfinite(e.val_excess)) d.entropy_floor = e.val_loss - e.val_excess;
    if (std::isfinite(e.val_loss) && (!best || e.val_loss < best->val_loss)) best = &e;
    if (e.has_eff_rank) d.final_eff_rank = e.eff_rank;
  }
  if (!std::isfinite(d.entropy_floor)) {
    if (auto f = read_entropy_floor(r.info.val_path)) d.entropy_floor = f->floor;
  }
  if (best && std::isfinite(best->val_bpb) && best->val_loss > 0) d.bpb_per_nat = best->val_bpb / best->val_loss;
  if (auto f = read_entropy_floor(r.info.train_path)) d.train_entropy_floor = f->floor;
  if (const int64_t T = r.info.ctx; T >= 1) {
    double h = 0, harmonic = 0;
    for (int64_t t = 0; t < T; ++t) {
      h += std::log(static_cast<double>(t + 1));
      harmonic += 1.0 / static_cast<double>(t + 1);
    }
    d.uniform_attn_entropy = h / static_cast<double>(T);
    if (T >= 2) d.uniform_attn_sink = (harmonic - 1) / static_cast<double>(T - 1);
  }
  auto excess = [&](const EvalRecord& e) {
    return std::isfinite(e.val_excess) ? e.val_excess : e.val_loss - d.entropy_floor;
  };
  if (!r.eval.empty()) {
    d.final_val_loss = r.eval.back().val_loss;
    d.final_val_step = r.eval.back().step;
    d.final_val_excess = excess(r.eval.back());
    d.final_val_bpb = r.eval.back().val_bpb;
  }
  if (best) {
    d.best_val_loss = best->val_loss;
    d.best_val_step = best->step;
    d.best_val_excess = excess(*best);
    d.best_val_bpb = best->val_bpb;
  }
  r.derived = std::move(d);
  add_warnings(r);
}

std::vector<std::string> run_dirs(const std::string& arg) {
  namespace fs = std::filesystem;
  if (file_exists((fs::path(arg) / "metrics.jsonl").string())) return {arg};
  const fs::path runs = fs::path(arg) / "runs";
  std::vector<std::string> out;
  if (fs::is_directory(runs)) {
    for (const auto& e : fs::directory_iterator(runs)) {
      if (file_exists((e.path() / "metrics.jsonl").string())) out.push_back(e.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  if (out.empty()) throw UsageError(arg + ": neither a run (no metrics.jsonl) nor a sweep with runs");
  return out;
}

SeedStats seed_stats(const std::vector<double>& values) {
  SeedStats st;
  double sum = 0;
  for (double v : values) {
    if (!std::isfinite(v)) {
      ++st.missing;
      continue;
    }
    sum += v;
    ++st.n;
  }
  if (st.n == 0) return st;
  st.mean = sum / static_cast<double>(st.n);
  if (st.n < 2) return st;
  double sq = 0;
  for (double v : values) {
    if (std::isfinite(v)) sq += (v - st.mean) * (v - st.mean);
  }
  st.std = std::sqrt(sq / static_cast<double>(st.n - 1));
  return st;
}

// ----- writing ---------------------------------------------------------------------------------

namespace {
JsonObject series(const RecordLayers& layers) {
  JsonObject o;
  for (const auto& [name, values] : layers) o.add(name, values);
  return o;
}
}  // namespace

std::string MachineRecord::kind() const {
  std::string dev = device;
  const auto paren = dev.find(" (");
  if (paren != std::string::npos) {
    dev = dev.substr(paren + 2, dev.size() - paren - 3);  // the GPU's model
  } else {
    dev = dev.substr(0, dev.find(':'));  // "cpu", "cuda" without an index
  }
  return cpu + " | " + dev;
}

std::string machine_json(const std::vector<MachineRecord>& starts) {
  std::string out = "[";
  for (size_t i = 0; i < starts.size(); ++i) {
    const MachineRecord& m = starts[i];
    out += (i ? ",\n " : "") + JsonObject()
                                   .add("step", m.step)
                                   .add("host", m.host)
                                   .add("cpu", m.cpu)
                                   .add("device", m.device)
                                   .add("torch", m.torch)
                                   .add("commit", m.commit)
                                   .str();
  }
  return out + "]\n";
}

std::vector<MachineRecord> read_machines(const std::string& run_dir) {
  std::vector<MachineRecord> out;
  const std::string path = (fs::path(run_dir) / "machine.json").string();
  if (!file_exists(path)) return out;
  try {
    const YAML::Node j = YAML::Load(read_file(path));
    if (!j.IsSequence()) return {};
    for (const auto& e : j) {
      MachineRecord m;
      m.step = e["step"].as<int64_t>();
      for (auto [key, field] : {std::pair{"host", &m.host}, std::pair{"cpu", &m.cpu}, std::pair{"device", &m.device},
                                std::pair{"torch", &m.torch}, std::pair{"commit", &m.commit}}) {
        *field = e[key].as<std::string>();
      }
      out.push_back(m);
    }
  } catch (const YAML::Exception&) {
    return {};
  }
  return out;
}

std::string to_json(const TrainRecord& r) {
  JsonObject j;
  j.add("kind", "train").add("step", r.step).add("loss", r.loss).add("lr", r.lr).add("grad_norm", r.grad_norm);
  if (!std::isnan(r.loss_scale)) j.add("loss_scale", r.loss_scale);
  if (r.overflow || r.nonfinite) {  // the step never reached its spike scores
    j.add("tokens", r.tokens).add("skipped", true).add(r.overflow ? "overflow" : "nonfinite", true);
    return j.str();
  }
  if (!std::isnan(r.loss_z)) j.add("loss_z", r.loss_z);
  if (!std::isnan(r.grad_norm_z)) j.add("grad_norm_z", r.grad_norm_z);
  j.add("tokens", r.tokens);
  if (r.skipped) j.add("skipped", true);
  if (!r.applied) return j.str();
  j.add("tok_per_s", r.tok_per_s);
  if (!std::isnan(r.param_norm)) j.add("param_norm", r.param_norm);
  if (!std::isnan(r.grad_noise_scale)) j.add("grad_noise_scale", r.grad_noise_scale);
  if (r.qk_clipped >= 0) j.add("qk_clipped", r.qk_clipped);
  j.add("layers", series(r.layers)).add("grad_norm_embed", r.grad_norm_embed).add("grad_norm_head", r.grad_norm_head);
  if (!std::isnan(r.logit_max)) j.add("logit_max", r.logit_max).add("lse_mean", r.lse_mean);
  if (!r.depth_weights.empty()) j.add("depth_weights", series(r.depth_weights));
  if (!r.params.empty()) {
    JsonObject p;
    for (const auto& [name, v] : r.params) p.add(name, v);
    j.add("params", p);
  }
  return j.str();
}

void add_task_losses(JsonObject& j, const TaskLosses& by_task) {
  JsonObject tasks;
  for (const auto& [name, t] : by_task) tasks.add(name, JsonObject().add("tokens", t.tokens).add("loss", t.loss));
  j.add("by_task", tasks);
}

std::string to_json(const EvalRecord& r) {
  JsonObject j;
  j.add("kind", "eval").add("step", r.step).add("val_loss", r.val_loss).add("eff_rank", r.eff_rank);
  if (!std::isnan(r.val_bpb)) j.add("val_bpb", r.val_bpb);
  if (!std::isnan(r.val_excess)) j.add("val_excess", r.val_excess);
  if (!r.by_task.empty()) add_task_losses(j, r.by_task);
  return j.str();
}

std::string to_json(const SpikeRecord& r) {
  return JsonObject()
      .add("kind", "spike").add("step", r.step).add("metric", r.metric).add("value", r.value).add("mean", r.mean)
      .add("std", r.std).add("z", r.z).add("action", r.action)
      .str();
}

double SpikeForensics::Layer::relative_jump() const { return rolling_mean > 0 ? grad_norm / rolling_mean : kNaN; }

std::string to_json(const SpikeForensics& f) {
  auto score = [](const SpikeForensics::Score& s) {
    return JsonObject().add("value", s.value).add("mean", s.mean).add("std", s.std).add("z", s.z);
  };
  auto layer = [](const SpikeForensics::Layer& l) {
    return JsonObject().add("layer", l.layer).add("grad_norm", l.grad_norm).add("rolling_mean", l.rolling_mean)
        .add("relative_jump", l.relative_jump());
  };
  std::vector<JsonObject> micro_batches, layers, by_jump;
  for (size_t a = 0; a < f.offsets.size(); ++a) {
    micro_batches.push_back(JsonObject().add("micro_batch", f.first_micro_batch + static_cast<int64_t>(a))
                                .add("offsets", f.offsets[a]));
  }
  std::vector<const SpikeForensics::Layer*> ranked;
  for (const auto& l : f.layers) {
    layers.push_back(layer(l));
    ranked.push_back(&l);
  }
  // Largest relative jump first; layers without a baseline last, in model order.
  std::stable_sort(ranked.begin(), ranked.end(), [](const SpikeForensics::Layer* a, const SpikeForensics::Layer* b) {
    const double ja = a->relative_jump(), jb = b->relative_jump();
    return (std::isnan(jb) ? -1.0 : jb) < (std::isnan(ja) ? -1.0 : ja);
  });
  for (const auto* l : ranked) by_jump.push_back(layer(*l));
  JsonObject j;
  j.add("step", f.step).add("action", f.action).add("window", f.window).add("zscore_threshold", f.zscore_threshold)
      .add("loss", score(f.loss)).add("grad_norm", score(f.grad_norm))
      .add("batch", JsonObject().add("data", f.data).add("format", f.format).add("ctx", f.ctx)
                        .add("window_tokens", f.ctx + 1).add("micro_batches", micro_batches))
      .add("layers", layers).add("layers_by_jump", by_jump);
  return j.str();
}

namespace {
// One captured step into j; `header` adds its step, loss and grad_norm (the baseline's; step N's
// are the autopsy's own top-level keys).
JsonObject& add_capture(JsonObject& j, const StepCapture& c, bool header) {
  if (header) j.add("step", c.step).add("loss", c.loss).add("grad_norm", c.grad_norm);
  j.add("action", c.action).add("rows_mean_loss", c.rows_mean);
  std::vector<JsonObject> rows;
  for (const RowLoss& r : c.rows) {
    std::vector<JsonObject> worst;
    for (const WorstPosition& w : r.worst) {
      worst.push_back(JsonObject().add("position", w.position).add("loss", w.loss).add("tokens", w.context)
                          .add("text", w.text));
    }
    rows.push_back(JsonObject().add("micro_batch", r.micro_batch).add("row", r.row).add("offset", r.offset)
                       .add("loss", r.loss).add("worst", worst));
  }
  j.add("rows", rows).add("layers", series(c.layers));
  return j.add("heads", JsonObject().add("attn_logit_max", c.head_logit_max).add("attn_entropy", c.head_entropy));
}
}  // namespace

std::string to_json(const Autopsy& a) {
  JsonObject j;
  j.add("run", a.run).add("step", a.step).add("checkpoint", a.checkpoint).add("updates_replayed", a.updates_replayed)
      .add("reproducible", a.reproducible).add("loss", a.loss).add("logged_loss", a.logged_loss)
      .add("grad_norm", a.grad_norm).add("logged_grad_norm", a.logged_grad_norm);
  add_capture(j, a.at, /*header=*/false);
  if (a.before) {
    JsonObject b;
    j.add("baseline", add_capture(b, *a.before, /*header=*/true));
  } else {
    j.add_null("baseline");  // step 0 has none
  }
  return j.str();
}

}  // namespace normlab
