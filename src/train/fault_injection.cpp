#include "train/fault_injection.h"

#include "core/error.h"
#include "core/rng.h"

#include <fmt/format.h>

#include <limits>
#include <string>

namespace ndt {

FaultInjection::FaultInjection(const RunConfig& config, int world_size)
    : seed_(config.seed),
      batch_size_(config.batch_size),
      seq_len_(config.seq_len),
      vocab_size_(config.model.vocab_size),
      window_(parse_batch_window(config.corrupt_batches)),
      gradient_step_(config.nonfinite_gradient_step),
      gradient_rank_(config.nonfinite_gradient_rank) {
  NDT_CHECK(gradient_rank_ < world_size, "debug.nonfinite_gradient_rank = {} is not a rank of the {}", gradient_rank_,
            world_size == 1 ? std::string("single-rank run") : fmt::format("{} ranks", world_size));
}

void FaultInjection::corrupt_rows(int64_t position, int row_begin, int rows, int32_t* inputs,
                                  int32_t* targets) const {
  if (!window_ || position < window_->first || position >= window_->first + window_->second) return;
  const int64_t n = int64_t{rows} * seq_len_, base = (position * batch_size_ + row_begin) * seq_len_;
  const int32_t target =
      static_cast<int32_t>(philox(seed_, hash_name("corrupt-target"), static_cast<uint64_t>(position))[0] %
                           vocab_size_);
  for (int64_t i = 0; i < n; ++i) {
    const auto words = philox(seed_, hash_name("corrupt-batch"), static_cast<uint64_t>(base + i));
    inputs[i] = static_cast<int32_t>(words[0] % vocab_size_);
    targets[i] = target;
  }
}

std::optional<std::string> FaultInjection::corrupt_gradient(int64_t step, int rank, const ParameterStore& store,
                                                            GradientSync& sync) const {
  if (step != gradient_step_ || rank != gradient_rank_) return std::nullopt;
  for (size_t p = 0; p < store.params().size(); ++p) {
    bool set = false;
    sync.update_reduced_gradient(p, [&](float* grad, int64_t numel) {
      if (numel > 0) grad[0] = std::numeric_limits<float>::infinity(), set = true;
    });
    if (set) {
      return fmt::format("debug: gradient of {} set to +inf on rank {} at step {}", store.params()[p].name(), rank,
                         step);
    }
  }
  return std::nullopt;
}

}  // namespace ndt
