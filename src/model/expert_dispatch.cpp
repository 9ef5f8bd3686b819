#include "model/expert_dispatch.h"

#include "core/error.h"
#include "kernels/kernels.h"

#include <numeric>

namespace ndt {

int64_t ExpertRoute::token_rows() const { return std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0}); }

int64_t ExpertRoute::expert_rows() const { return std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0}); }

int64_t ExpertRoute::expert_count(int le) const {
  int64_t n = 0;
  for (int src = 0; src < ep; ++src) n += recv_counts[static_cast<size_t>(src * local_experts + le)];
  return n;
}

void ExpertDispatch::plan(ExpertRoute& route) const {
  route.ep = 1;
  route.local_experts = static_cast<int>(route.send_counts.size());
  route.recv_counts = route.send_counts;
  route.most_loaded_rows = route.expert_rows();
}

void ExpertDispatch::to_experts(const ExpertRoute& route, const float* tokens, float* experts, int64_t width) const {
  kernels::copy(experts, tokens, route.token_rows() * width);
}

void ExpertDispatch::from_experts(const ExpertRoute& route, const float* experts, float* tokens, int64_t width) const {
  kernels::copy(tokens, experts, route.expert_rows() * width);
}

}  // namespace ndt
