#include "metrics/report.h"

#include <cmath>

#include <fmt/format.h>

#include "core/json.h"
#include "metrics/records.h"

namespace normlab {
namespace {

std::string excess(double e) { return std::isfinite(e) ? fmt::format(" (excess over floor {:.4f})", e) : ""; }

// Per-layer columns per table block, so a record with many series stays readable on a terminal.
constexpr size_t kLayerColumnsPerBlock = 6;

// Every layers.<name> series of the last full-diagnostics record, whatever its name: a row per
// block (and an `out` row for the last position of the [L+1] residual-stream series).
std::string layer_table(const TrainRecord& t) {
  size_t blocks = SIZE_MAX, rows = 0;
  for (const auto& [name, v] : t.layers) {
    blocks = std::min(blocks, v.size());
    rows = std::max(rows, v.size());
  }
  std::string o = fmt::format(
      "\nper-layer diagnostics at step {} (block_cos near 1: the block barely changes the stream)\n", t.step);
  if (rows > blocks) o += "(series of L+1 values: row blocks.i is the stream entering block i, out the stream leaving the last block)\n";
  for (size_t c0 = 0; c0 < t.layers.size(); c0 += kLayerColumnsPerBlock) {
    const size_t c1 = std::min(t.layers.size(), c0 + kLayerColumnsPerBlock);
    if (c0) o += "\n";
    o += fmt::format("{:<12}", "layer");
    for (size_t c = c0; c < c1; ++c) o += fmt::format("{:>{}}", t.layers[c].first, std::max<size_t>(12, t.layers[c].first.size() + 2));
    o += "\n";
    for (size_t i = 0; i < rows; ++i) {
      o += fmt::format("{:<12}", i < blocks ? fmt::format("blocks.{}", i) : std::string("out"));
      for (size_t c = c0; c < c1; ++c) {
        const auto& [name, v] = t.layers[c];
        const size_t w = std::max<size_t>(12, name.size() + 2);
        o += i < v.size() && !std::isnan(v[i]) ? fmt::format("{:>{}.4g}", v[i], w) : fmt::format("{:>{}}", "-", w);
      }
      o += "\n";
    }
  }
  return o;
}

// AttnRes: each reader's mean weight per source (rows: the readers in order; columns: e, then the
// later sources, blank where a reader has none yet).
std::string depth_weight_table(const TrainRecord& t) {
  size_t cols = 0;
  for (const auto& [reader, w] : t.depth_weights) cols = std::max(cols, w.size());
  std::string o = fmt::format("\nAttnRes depth-attention weights at step {} (mean weight of each reader on each source; "
                              "source 0 is the embedding)\n{:<18}", t.step, "reader");
  for (size_t j = 0; j < cols; ++j) o += fmt::format("{:>7}", j);
  o += "\n";
  for (const auto& [reader, w] : t.depth_weights) {
    o += fmt::format("{:<18}", reader);
    for (size_t j = 0; j < w.size(); ++j) o += fmt::format("{:>7.3f}", w[j]);
    o += "\n";
  }
  return o;
}

std::vector<double> diag_series(const RunRecords& r, const char* name) {
  const TrainRecord* t = r.diag_record();
  const std::vector<double>* v = t ? t->layer(name) : nullptr;
  return v ? *v : std::vector<double>{};
}

}  // namespace

std::string report_text(const std::string& run_dir) {
  const RunRecords r = read_run_with_records(run_dir);
  const RunInfo& i = r.info;
  const RunDerived& s = r.derived;
  std::string o;
  o += fmt::format("run         {}\n", r.dir);
  if (!i.layout.empty()) {
    o += fmt::format("model       layout {}, norm {}{}{}, L={}, d={}\n", i.layout, i.norm,
                     i.residual != "add" ? ", residual " + i.residual : "",
                     i.value_residual != "none" ? ", value residual " + i.value_residual : "", i.n_layers, i.d_model);
  }
  o += fmt::format("progress    last logged step {}, {} tokens, {} skipped updates ({} non-finite)\n", s.last_step,
                   s.tokens, s.skipped, s.nonfinite);
  if (std::isfinite(s.entropy_floor)) o += fmt::format("floor       {:.4f} nats/token (val entropy floor)\n", s.entropy_floor);
  o += fmt::format("train loss  {:.4f} at the last logged step\n", s.final_train_loss);
  o += fmt::format("val loss    final {:.4f} at step {}{}\n", s.final_val_loss, s.final_val_step,
                   excess(s.final_val_excess));
  o += fmt::format("            best  {:.4f} at step {}{}\n", s.best_val_loss, s.best_val_step,
                   excess(s.best_val_excess));
  if (std::isfinite(s.final_val_bpb) || std::isfinite(s.best_val_bpb)) {
    o += fmt::format("val bpb     final {:.4f}, best {:.4f} bits/byte (at the best val loss)\n", s.final_val_bpb,
                     s.best_val_bpb);
  }
  if (!r.eval.empty() && !r.eval.back().by_task.empty()) {  // eval.by_task: the last evaluation's split
    std::string tasks;
    for (const auto& [name, t] : r.eval.back().by_task) tasks += fmt::format("{}{} {:.4f}", tasks.empty() ? "" : ", ", name, t.loss);
    o += fmt::format("by task     {} at step {} (nats/token)\n", tasks, r.eval.back().step);
  }
  o += fmt::format("spikes      {}\n", s.spikes);
  for (size_t k = 0; k < r.spikes.size() && k < 10; ++k) {
    const auto& p = r.spikes[k];
    o += fmt::format("            step {:>6}  {:<9} {:.4g}  z {:.1f}  -> {}\n", p.step, p.metric, p.value, p.z, p.action);
  }
  if (r.spikes.size() > 10) o += fmt::format("            ... {} more\n", r.spikes.size() - 10);
  for (size_t k = 0; k < r.autopsies.size(); ++k) {
    const auto& a = r.autopsies[k];
    o += fmt::format("{}step {:>6}  {} (loss {:.6g}, logged {:.6g})  {}\n", k ? "            " : "autopsies   ", a.step,
                     a.reproducible ? "reproducible" : "NOT reproducible", a.loss, a.logged_loss, a.path);
  }
  o += fmt::format("spike score {:.4f} (share of logged steps with loss or grad-norm z above the threshold)\n",
                   s.spike_score);
  if (std::isfinite(s.final_eff_rank)) o += fmt::format("eff. rank   {:.2f} (head input states, last eval)\n", s.final_eff_rank);
  if (const TrainRecord* t = r.diag_record()) {
    o += layer_table(*t);
    if (!t->depth_weights.empty()) o += depth_weight_table(*t);
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
    row("embed", [](const GradProfile& p) { return p.embed; });
    for (size_t b = 0; b < s.profiles[0].blocks.size(); ++b) {
      row(fmt::format("blocks.{}", b), [b](const GradProfile& p) { return b < p.blocks.size() ? p.blocks[b] : std::nan(""); });
    }
    row("head", [](const GradProfile& p) { return p.head; });
    row("first/last", [](const GradProfile& p) { return p.first_last(); });
  }
  o += "\n";
  if (s.warnings.empty()) o += "warnings    none\n";
  for (const auto& w : s.warnings) o += "warning: " + w + "\n";
  return o;
}

std::string report_json(const std::string& run_dir) {
  const RunRecords r = read_run_with_records(run_dir);
  const RunInfo& i = r.info;
  const RunDerived& s = r.derived;
  std::string spikes = "[", profiles = "[", warnings = "[";
  for (size_t k = 0; k < r.spikes.size(); ++k) {
    const auto& p = r.spikes[k];
    spikes += (k ? "," : "") + JsonObject().add("step", p.step).add("metric", p.metric).add("value", p.value)
                                    .add("z", p.z).add("action", p.action).str();
  }
  for (size_t k = 0; k < s.profiles.size(); ++k) {
    const auto& p = s.profiles[k];
    profiles += (k ? "," : "") + JsonObject().add("step", p.step).add("grad_norm", p.blocks).add("grad_norm_embed", p.embed)
                                      .add("grad_norm_head", p.head).str();
  }
  for (size_t k = 0; k < s.warnings.size(); ++k) warnings += (k ? "," : "") + json_quote(s.warnings[k]);
  JsonObject layers;
  const TrainRecord* diag = r.diag_record();
  if (diag) {
    for (const auto& [name, v] : diag->layers) layers.add(name, v);
  }
  JsonObject depth;
  if (diag) {
    for (const auto& [reader, w] : diag->depth_weights) depth.add(reader, w);
  }
  JsonObject j;
  j.add("run", r.dir).add("layout", i.layout).add("norm", i.norm).add("n_layers", i.n_layers)
      .add("last_step", s.last_step).add("tokens", s.tokens).add("skipped", s.skipped).add("nonfinite", s.nonfinite)
      .add("ctx", i.ctx).add("entropy_floor", s.entropy_floor).add("train_entropy_floor", s.train_entropy_floor)
      .add("bpb_per_nat", s.bpb_per_nat).add("uniform_attn_entropy", s.uniform_attn_entropy).add("uniform_attn_sink", s.uniform_attn_sink).add("final_train_loss", s.final_train_loss).add("final_val_loss", s.final_val_loss)
      .add("final_val_step", s.final_val_step).add("final_val_excess", s.final_val_excess)
      .add("best_val_loss", s.best_val_loss).add("best_val_step", s.best_val_step)
      .add("best_val_excess", s.best_val_excess).add("final_val_bpb", s.final_val_bpb)
      .add("best_val_bpb", s.best_val_bpb).add("spike_score", s.spike_score).add("spike_count", s.spikes)
      .add("diverged", s.diverged).add("max_grad_norm", s.max_grad_norm).add("tok_per_s", s.tok_per_s)
      .add("grad_ratio_first_last", s.grad_ratio_first_last).add("final_eff_rank", s.final_eff_rank)
      .add("block_cos", diag_series(r, "block_cos")).add("attn_sink", diag_series(r, "attn_sink"))
      .add("act_max", diag_series(r, "act_max"))
      .add("diag_step", diag ? diag->step : int64_t{-1}).add("layers", layers).add("depth_weights", depth)
      .add_raw("spikes", spikes + "]")
      .add_raw("autopsies", [&] {
        std::string a = "[";
        for (size_t k = 0; k < r.autopsies.size(); ++k) {
          const auto& x = r.autopsies[k];
          a += (k ? "," : "") + JsonObject().add("step", x.step).add("reproducible", x.reproducible)
                                    .add("path", x.path).str();
        }
        return a + "]";
      }())
      .add_raw("grad_norm_profiles", profiles + "]").add_raw("warnings", warnings + "]");
  return j.str() + "\n";
}

}  // namespace normlab
