// What a run reads besides its config, loaded once while the config is checked (the checks need
// it: token counts, vocabulary, the tokenizer's size) and handed on to the trainer. Apart from
// train/run_config.h so that the config check's header stays free of LibTorch (the sweep fuzz
// target compiles it without).
#pragma once

#include <optional>

#include "data/corpus.h"
#include "data/tokenizer.h"

namespace normlab {

struct RunData {
  Corpus train, val;
  std::optional<Tokenizer> tokenizer;  // data.tokenizer
};

}  // namespace normlab
