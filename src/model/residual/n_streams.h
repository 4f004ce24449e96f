// What the n-stream carriers (HC, mHC) share: n streams X_j (B, T, d) in the stream's precision,
// each sublayer read through an (n, n+1) matrix per position (column 0 the sublayer's input,
// columns 1..n the carried streams) and its output added back scaled per stream, and the
// composite gain P of the stream-mixing matrices for the res_gain diagnostics.
#pragma once

#include "model/residual/residual.h"
#include "model/transformer.h"

namespace normlab {

class NStreamCarrier : public TermStream {
 public:
  explicit NStreamCarrier(int64_t n) : n_(n) {}
  void start(const torch::Tensor& e) override {
    X_.assign(n_, e);
    P_ = torch::Tensor();
  }
  torch::Tensor view() override { return concat_streams(X_); }
  void end_block(int64_t, LayerSeries& stats) override { add_residual_gain(stats, P_); }

 protected:
  // One sublayer: Y = the streams read through W (B, T, n, n+1) or (n, n+1); y = G(Y_0);
  // X'_k = Y_{k+1} + b_k y (b (B, T, n) or (n)). With capture on, P = M P for the stream-mixing
  // matrix M[k, j] = W[j, k+1].
  void step(const torch::Tensor& W, const torch::Tensor& b, const SublayerTerm& G) {
    Streams Y = mix_streams(W, X_);  // n + 1 streams, one read
    auto y = G(Y[0]);
    X_ = add_scaled(Streams(Y.begin() + 1, Y.end()), b, y);
    if (capture_) {
      torch::NoGradGuard ng;
      auto M = W.detach().narrow(-1, 1, n_).transpose(-1, -2).to(torch::kFloat);
      if (M.dim() == 2) M = M.expand({y.size(0), y.size(1), n_, n_});
      P_ = P_.defined() ? torch::matmul(M, P_) : M;
    }
  }

  int64_t n_;
  Streams X_;
  torch::Tensor P_;
};

}  // namespace normlab
