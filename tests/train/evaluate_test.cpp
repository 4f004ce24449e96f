// The validation loss per task (evaluate(..., by_task), `normlab eval --by-task`): each target
// byte is labelled by the line it sits on, and the per-task losses are the composed per-token
// cross-entropy of the plain evaluation, split by those labels.
#include <gtest/gtest.h>

#include <map>

#include "core/errors.h"
#include "data/corpus.h"
#include "test_util.h"
#include "train/evaluate.h"
#include "train/run_config.h"

namespace normlab {
namespace {

TEST(EvalByTaskTest, LinesAreLabelledByTheirTaskPrefix) {
  testing::TempDir dir;
  // Byte positions: "c: ab|ab\n" 0-8, "w: x y.\n" 9-16, "free text\n" 17-26, "k: a=1 ; a?1\n" 27-39.
  testing::write_text(dir / "v.txt", "c: ab|ab\nw: x y.\nfree text\nk: a=1 ; a?1\n");
  const Corpus corpus = Corpus::load(dir / "v.txt");
  const auto all = line_tasks(corpus, 0, corpus.size());
  ASSERT_EQ(static_cast<int64_t>(all.size()), corpus.size());
  for (int64_t i = 0; i < corpus.size(); ++i) {
    const std::string want = i <= 8 ? "c" : i <= 16 ? "w" : i <= 26 ? "other" : "k";
    EXPECT_EQ(all[static_cast<size_t>(i)], want) << "byte " << i;
  }
  // A slice starting mid-line finds its line's start before the slice.
  const auto mid = line_tasks(corpus, 12, 20);
  ASSERT_EQ(mid.size(), 20u);
  EXPECT_EQ(mid[0], "w");
  EXPECT_EQ(mid[5], "other");  // byte 17
  EXPECT_EQ(mid[15], "k");     // byte 27
}

TEST(EvalByTaskTest, LineStartingBeyondTheScanIsOther) {
  testing::TempDir dir;
  const std::string long_line = "c: " + std::string(static_cast<size_t>(kTaskScan) + 100, 'x') + "\nw: y\n";
  testing::write_text(dir / "v.txt", long_line);
  const Corpus corpus = Corpus::load(dir / "v.txt");
  const int64_t late = kTaskScan + 50;  // on the c: line, whose start is more than kTaskScan back
  const auto labels = line_tasks(corpus, late, corpus.size() - late);
  EXPECT_EQ(labels[0], "other");
  EXPECT_EQ(labels.back(), "w");
  EXPECT_EQ(line_tasks(corpus, 40, 1)[0], "c");
  // A line starting exactly kTaskScan bytes back is still looked up.
  const std::string exact = "x\nw: " + std::string(static_cast<size_t>(kTaskScan), 'y') + "\n";
  testing::write_text(dir / "e.txt", exact);
  EXPECT_EQ(line_tasks(Corpus::load(dir / "e.txt"), 2 + kTaskScan, 1)[0], "w");
}

TEST(EvalByTaskTest, TaskLossesSplitTheLossByLabel) {
  testing::TempDir dir;
  Config c = check_and_resolve(LoadedConfig{testing::tiny_config(dir / "run"), {}}, true);
  torch::manual_seed(7);
  Transformer model(c.model);
  init_weights(model, InitConfig{});
  model->eval();
  const Corpus corpus = Corpus::load(c.data.val);
  const int64_t windows = 64;
  const auto plain = evaluate(model, corpus, windows, torch::kCPU);
  const auto split = evaluate(model, corpus, windows, torch::kCPU, nullptr, 16, /*by_task=*/true);
  EXPECT_TRUE(plain.by_task.empty());
  EXPECT_EQ(split.loss, plain.loss);  // the same batches: the plain loss is untouched
  // Every predicted token in exactly one task; the token-weighted task losses give the loss back.
  int64_t tokens = 0;
  double weighted = 0;
  for (const auto& [name, t] : split.by_task) {
    tokens += t.tokens;
    weighted += t.loss * static_cast<double>(t.tokens);
  }
  EXPECT_EQ(tokens, split.tokens);
  EXPECT_NEAR(weighted / static_cast<double>(tokens), plain.loss, 1e-6);
  // Each task's loss is the mean cross-entropy over the positions its label marks, composed here.
  const int64_t ctx = c.model.ctx;
  const auto offsets = eval_offsets(corpus.size(), ctx, windows);
  std::map<std::string, std::pair<int64_t, double>> want;
  torch::NoGradGuard ng;
  for (const int64_t off : offsets) {
    const auto w = corpus.windows({off}, ctx);
    const auto logits = model->head(model->hidden(w.narrow(1, 0, ctx)));
    const auto targets = w.narrow(1, 1, ctx);
    const auto labels = line_tasks(corpus, off + 1, ctx);
    for (int64_t t = 0; t < ctx; ++t) {
      const double l = lm_loss(logits.narrow(1, t, 1), targets.narrow(1, t, 1)).item<double>();
      auto& [n, s] = want[labels[static_cast<size_t>(t)]];
      n += 1;
      s += l;
    }
  }
  ASSERT_EQ(want.size(), split.by_task.size());
  for (const auto& [name, ns] : want) {
    ASSERT_TRUE(split.by_task.count(name)) << name;
    EXPECT_EQ(split.by_task.at(name).tokens, ns.first) << name;
    EXPECT_NEAR(split.by_task.at(name).loss, ns.second / static_cast<double>(ns.first), 1e-5) << name;
  }
  // The toy corpus's five tasks are all there (its lines start with w:, c:, r:, b:, k:).
  for (const char* task : {"w", "c", "r", "b", "k"}) EXPECT_TRUE(split.by_task.count(task)) << task;
}

TEST(EvalByTaskTest, NeedsAByteLevelCorpus) {
  testing::TempDir dir;
  Config c = check_and_resolve(LoadedConfig{testing::tiny_config(dir / "run"), {}}, true);
  Transformer model(c.model);
  std::vector<uint32_t> toks(200, 3);
  const Corpus corpus = Corpus::from_tokens(toks);
  EXPECT_THROW(evaluate(model, corpus, 2, torch::kCPU, nullptr, 4, /*by_task=*/true), UsageError);
}

}  // namespace
}  // namespace normlab
