// Bounds tested exactly at their edges (issue 35, class 7): a bound tested only far from
// its edge cannot tell < from <= (optim.beta2 = 1 accepted, then a NaN step: AdamW's
// second moment never forgets, its bias correction divides by 1 - beta2^t = 0). For every
// bounded key: the edge itself, accepted or refused as documented, and the nearest value
// on the other side.
#include "test_support.h"
#include "train/config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ndt {
namespace {

struct Edge {
  std::string key;
  std::string inside;   // the edge itself when the bound is closed, else the nearest value inside
  std::string outside;  // the edge itself when the bound is open, else the nearest value outside
  std::vector<std::string> also = {};  // settings the key needs
};

// float keys take the nearest float (0.99999994 is the largest below 1), double keys the
// nearest double.
const std::vector<Edge>& edges() {
  static const std::vector<Edge> table = {
      {"optim.beta1", "0", "1"},
      {"optim.beta1", "0.99999994", "-1e-30"},
      {"optim.beta2", "0", "1"},
      {"optim.beta2", "0.99999994", "-1e-30"},
      {"optim.eps", "1e-30", "0"},
      {"optim.lr", "1e-30", "0"},
      {"optim.min_lr_ratio", "0", "-1e-30"},
      {"optim.min_lr_ratio", "1", "1.0000001"},
      {"optim.weight_decay", "0", "-1e-30"},
      {"optim.grad_clip", "0", "-1e-30"},
      {"optim.z_loss", "0", "-1e-30"},
      {"optim.zclip_alpha", "1e-300", "0"},
      {"optim.zclip_alpha", "0.9999999999999999", "1"},
      {"optim.zclip_threshold", "1e-300", "0"},
      {"stability.rollback_lr_factor", "1", "1.0000001"},
      {"stability.rollback_lr_factor", "1e-30", "0"},
      {"stability.spike_window", "2", "1", {"stability.spike_min_samples=2"}},
      {"stability.spike_min_samples", "32", "33"},
      {"stability.spike_min_samples", "2", "1"},
      {"precision.loss_scale.backoff_factor", "0.9999999999999999", "1"},
      {"precision.loss_scale.growth_factor", "1.0000000000000002", "1"},
      {"model.moe_capacity_factor", "0", "-1e-30", {"model.n_experts=4", "model.moe_d_ff=64"}},
      {"model.moe_top_k", "4", "5", {"model.n_experts=4", "model.moe_d_ff=64"}},
      {"model.moe_every", "4", "5", {"model.n_experts=4", "model.moe_d_ff=64"}},
      {"model.n_layer", "65536", "65537", {"model.d_model=8", "model.n_head=1", "model.d_ff=8"}},
      {"train.seq_len", "256", "257"},
      {"parallel.bucket_mb", "1048576", "1048576.0000000002"},
      {"parallel.bucket_mb", "3.814697265625e-06", "3.8146972656249996e-06"},
      {"sample.temperature", "0", "-1e-30"},
      {"lora.rank", "1", "0", {"lora.targets=[\"wq\"]"}},
      {"lora.rank", "128", "129", {"lora.targets=[\"wq\"]"}},  // gpt2-tiny: d_model 128
      {"lora.alpha", "1e-30", "0", {"lora.targets=[\"wq\"]"}},
      {"lora.dropout", "0", "1e-30", {"lora.targets=[\"wq\"]"}},
  };
  return table;
}

std::string error_with(const Edge& e, const std::string& value) {
  std::vector<std::string> sets = {"model.preset=gpt2-tiny", "data.train=" + testing::shared_shard()};
  sets.insert(sets.end(), e.also.begin(), e.also.end());
  sets.push_back(e.key + "=" + value);
  try {
    load_run_config("", sets);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// Catches: an open bound tested only far from its edge (< turned <=, a value exactly at
// the bound accepted and failing later), a closed bound refusing its own edge.
TEST(ConfigEdges, EveryBoundHoldsExactlyAtItsEdge) {
  for (const Edge& e : edges()) {
    EXPECT_EQ(error_with(e, e.inside), "") << e.key << " = " << e.inside << " is inside the bound";
    const std::string refused = error_with(e, e.outside);
    EXPECT_NE(refused.find(e.key + " = "), std::string::npos)
        << e.key << " = " << e.outside << " is outside the bound; the error: \"" << refused << "\"";
  }
}

}  // namespace
}  // namespace ndt
