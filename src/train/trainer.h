// The training loop on one rank: deterministic batches, gradient accumulation over
// micro-batches, global-norm clipping, AdamW with warmup + cosine, periodic
// validation, one progress line and one metrics.jsonl record per step, a summary and
// a text sample at the end.
#pragma once

#include "data/loader.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "train/config.h"
#include "train/flops.h"
#include "train/metrics.h"

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace ndt {

struct StepStats {
  int64_t step = 0;  // 0-based index of the step just taken
  double loss = 0;
  float lr = 0;
  double grad_norm = 0;
  double seconds = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  size_t peak_bytes = 0;
};

struct RunSummary {
  std::vector<double> losses;
  std::vector<std::pair<int64_t, double>> val_losses;  // (steps done, loss)
  double median_tokens_per_s = 0;
  double median_mfu = 0;
  double unigram_entropy = 0;  // nats per token of the training data
  std::string sample;
};

class Trainer {
 public:
  // log == nullptr: silent (tests). Metrics go to <out_dir>/metrics.jsonl.
  Trainer(const RunConfig& config, std::ostream* log);

  StepStats step();
  double evaluate();  // mean validation loss over train.eval_batches micro-batches
  RunSummary run();

  Transformer& model() { return *model_; }
  int64_t steps_done() const { return step_; }

 private:
  void print_header();
  void print_step(const StepStats& s);

  RunConfig config_;
  std::ostream* log_;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<AdamW> optimizer_;
  TokenDataset train_data_;
  std::unique_ptr<TokenDataset> val_data_;
  BatchLoader train_loader_;
  std::unique_ptr<BatchLoader> val_loader_;
  PeakFlops peak_;
  MetricsLog metrics_;
  int64_t step_ = 0;
  std::vector<int32_t> inputs_, targets_;
};

// Natural-log entropy of the token frequencies (the loss of the best unigram model).
double unigram_entropy(const uint16_t* tokens, int64_t n);

}  // namespace ndt
