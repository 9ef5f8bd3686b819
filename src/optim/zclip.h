// ZClip (Kumar et al., 2025): adaptive gradient clipping driven by the statistics of the
// global gradient norm itself. Instead of a fixed max_norm, an exponential moving
// average (EMA) of the norm's mean and variance is kept, and a step whose norm is an
// outlier (z-score above threshold) is clipped to mean + threshold * std.
//
// update(norm) is called once per applied step with the global, pre-clip gradient norm
// (a step skipped for a non-finite gradient is not passed in). The trainer then scales
// the gradients by min(1, target / norm).
//
// Warm-up, the first warmup_steps norms x_1 .. x_n (n = warmup_steps): never clipped,
// only collected (Welford's running mean and sum of squared deviations M2). After the
// n-th norm
//   mean = (1/n) sum x_i,     var = (1/n) sum (x_i - mean)^2   (population variance).
//
// After warm-up, for each norm x, with mean and var from the previous step:
//   std = sqrt(var)
//   z   = (x - mean) / (std + eps)
//   if z > threshold: clipped, target = mean + threshold * std
//   else:             not clipped, target = x
//   c = target        (the value kept: the clipped norm, so a spike does not drag the
//                      statistics after it)
//   mean' = alpha * mean + (1 - alpha) * c        computed as mean + (1 - alpha) * (c - mean),
//                                                 the same value in exact arithmetic, so a
//                                                 constant run of norms keeps mean exact
//   var'  = alpha * var + (1 - alpha) * (c - mean')^2   (the deviation from the UPDATED
//                                                 mean mean', as the ZClip reference code)
// During warm-up a Decision has z = 0 (no statistics yet) and target = norm.
//
// Pure bookkeeping on one double per step: no communication. Every rank passes the same
// global norm, so all ranks keep the same statistics and make the same decisions.
#pragma once

#include <vector>

namespace ndt {

struct ZClipConfig {
  double alpha = 0.97;     // EMA decay, in (0, 1)            optim.zclip_alpha
  double threshold = 2.5;  // z-score above which to clip, > 0 optim.zclip_threshold
  int warmup_steps = 25;   // norms collected before clipping, >= 1   optim.zclip_warmup
  double eps = 1e-6;       // added to std in the z-score, > 0 (no config key yet; named
                           // optim.zclip_eps in errors)

  // Throws ndt::Error naming optim.zclip_<field> and the value.
  void validate() const;
};

class ZClip {
 public:
  struct Decision {
    bool clipped;   // z > threshold: the norm is clipped to target
    double norm;    // the norm passed in
    double target;  // the norm to clip to (== norm when not clipped)
    double z;       // (norm - mean) / (std + eps) before this step's update; 0 in warm-up
  };

  // Layout of state(): kStateSize plain numbers,
  //   [0] norms seen so far (a whole number),
  //   [1] 1 once warm-up is over (statistics are the EMA), else 0,
  //   [2] the mean: the running mean of the norms seen during warm-up, the EMA after,
  //   [3] during warm-up the running sum of squared deviations from the mean (Welford's
  //       M2), after warm-up the EMA variance.
  static constexpr int kStateSize = 4;

  explicit ZClip(const ZClipConfig& config);  // validates config

  // Records this step's global pre-clip gradient norm and decides whether to clip it.
  // Throws ndt::Error (changing nothing) for a norm that is NaN, infinite or negative.
  Decision update(double norm);

  int steps_seen() const { return steps_; }
  bool warmed_up() const { return warmed_up_; }
  // The running mean / population variance of the norms so far during warm-up (0 before
  // the first), the EMA statistics after.
  double mean() const { return mean_; }
  double variance() const;

  const ZClipConfig& config() const { return config_; }

  std::vector<double> state() const;
  // Throws ndt::Error (changing nothing) for a malformed state: the wrong size, a value
  // that is not finite, a step count that is not a whole number >= 0, a phase flag other
  // than 0 or 1, a negative mean or variance, a warm-up state with steps outside
  // [0, optim.zclip_warmup), or a post-warm-up state with no steps. After restore the
  // decisions continue bit for bit as if the run had not been interrupted.
  void restore(const std::vector<double>& state);

 private:
  ZClipConfig config_;
  int steps_ = 0;
  bool warmed_up_ = false;
  double mean_ = 0;
  double m2_or_var_ = 0;  // Welford's M2 during warm-up, the EMA variance after
};

}  // namespace ndt
