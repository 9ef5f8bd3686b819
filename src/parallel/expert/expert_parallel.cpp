#include "parallel/expert/expert_parallel.h"

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/kernels.h"

#include <algorithm>
#include <limits>

namespace ndt {

namespace {

// Elements per ep rank of a [ep x local_experts] table of row counts (send_counts by
// destination: global expert j x L + le; recv_counts by source), each row `width` floats.
std::vector<size_t> elements_per_rank(const std::vector<int64_t>& counts, int ep, int local_experts, int64_t width) {
  std::vector<size_t> out(static_cast<size_t>(ep), 0);
  for (int j = 0; j < ep; ++j) {
    for (int le = 0; le < local_experts; ++le) {
      out[static_cast<size_t>(j)] += static_cast<size_t>(counts[static_cast<size_t>(j * local_experts + le)] * width);
    }
  }
  return out;
}

// Copies the expert-side blocks between the order the all-to-all-v delivers, [src][le],
// and the one the experts compute in, [le][src] (to_expert_order), or back.
void regroup(const ExpertRoute& route, const float* in, float* out, int64_t width, bool to_expert_order) {
  const int ep = route.ep, L = route.local_experts;
  auto count = [&](int src, int le) { return route.recv_counts[static_cast<size_t>(src * L + le)] * width; };
  std::vector<int64_t> by_source(static_cast<size_t>(ep * L));  // where block (src, le) starts in [src][le]
  int64_t offset = 0;
  for (int src = 0; src < ep; ++src) {
    for (int le = 0; le < L; ++le) by_source[static_cast<size_t>(src * L + le)] = offset, offset += count(src, le);
  }
  offset = 0;
  for (int le = 0; le < L; ++le) {
    for (int src = 0; src < ep; ++src) {
      const int64_t source_order = by_source[static_cast<size_t>(src * L + le)], n = count(src, le);
      if (to_expert_order) {
        kernels::copy(out + offset, in + source_order, n);
      } else {
        kernels::copy(out + source_order, in + offset, n);
      }
      offset += n;
    }
  }
}

}  // namespace

void validate_expert_parallel(const ModelConfig& config, int ep) {
  NDT_CHECK(config.is_moe(), "parallel.ep = {} needs a mixture-of-experts model (model.n_experts > 0)", ep);
  NDT_CHECK(config.n_experts % ep == 0, "model.n_experts = {} does not split over parallel.ep = {}", config.n_experts,
            ep);
}

void ExpertParallel::plan(ExpertRoute& route) const {
  const int n = size(), experts = static_cast<int>(route.send_counts.size());
  NDT_CHECK(experts % n == 0, "model.n_experts = {} does not split over parallel.ep = {}", experts, n);
  route.ep = n;
  route.local_experts = experts / n;
  std::vector<int32_t> send(route.send_counts.size()), all(route.send_counts.size() * static_cast<size_t>(n));
  for (size_t e = 0; e < send.size(); ++e) {
    NDT_CHECK(route.send_counts[e] >= 0 && route.send_counts[e] <= std::numeric_limits<int32_t>::max(),
              "expert parallelism: {} rows routed to expert {} (at most 2^31 - 1 per micro-batch)", route.send_counts[e],
              e);
    send[e] = static_cast<int32_t>(route.send_counts[e]);
  }
  // Every rank's counts, not only those for this rank's experts: the same one exchange
  // also says how many rows each rank of the group will process.
  ep_.all_gather(send.data(), all.data(), send.size(), DType::i32);
  const int L = route.local_experts;
  route.recv_counts.assign(static_cast<size_t>(n * L), 0);
  route.most_loaded_rows = 0;
  for (int holder = 0; holder < n; ++holder) {
    int64_t rows = 0;
    for (int src = 0; src < n; ++src) {
      for (int le = 0; le < L; ++le) {
        const int64_t count = all[static_cast<size_t>(src * experts + holder * L + le)];
        rows += count;
        if (holder == rank()) route.recv_counts[static_cast<size_t>(src * L + le)] = count;
      }
    }
    route.most_loaded_rows = std::max(route.most_loaded_rows, rows);
  }
}

void ExpertParallel::to_experts(const ExpertRoute& route, const float* tokens, float* experts, int64_t width) const {
  NDT_CHECK(route.ep == size(), "expert parallelism: a route planned for ep = {} used over ep = {}", route.ep, size());
  Tensor received = Tensor::empty({route.expert_rows() * width}, DType::f32, MemTag::comm);
  ep_.all_to_all_v(tokens, elements_per_rank(route.send_counts, route.ep, route.local_experts, width),
                   received.data<float>(), elements_per_rank(route.recv_counts, route.ep, route.local_experts, width),
                   DType::f32);
  regroup(route, received.data<float>(), experts, width, /*to_expert_order=*/true);
}

void ExpertParallel::from_experts(const ExpertRoute& route, const float* experts, float* tokens, int64_t width) const {
  NDT_CHECK(route.ep == size(), "expert parallelism: a route planned for ep = {} used over ep = {}", route.ep, size());
  Tensor by_source = Tensor::empty({route.expert_rows() * width}, DType::f32, MemTag::comm);
  regroup(route, experts, by_source.data<float>(), width, /*to_expert_order=*/false);
  ep_.all_to_all_v(by_source.data<float>(), elements_per_rank(route.recv_counts, route.ep, route.local_experts, width),
                   tokens, elements_per_rank(route.send_counts, route.ep, route.local_experts, width), DType::f32);
}

std::vector<float> gather_expert_parallel(const ParameterStore& store, const float* local_values, Communicator* ep) {
  const int n = ep ? ep->size() : 1;
  std::vector<float> joined;
  joined.reserve(static_cast<size_t>(store.numel() * n));
  std::vector<float> blocks;
  for (const Parameter& p : store.params()) {
    const float* local = local_values + p.arena_offset;
    const int64_t numel = p.numel();
    if (n == 1 || !p.sharded_on(Axis::ep) || numel == 0) {
      joined.insert(joined.end(), local, local + numel);
      continue;
    }
    // Dim 0 (the experts) is the outermost: the ranks' blocks in rank order are the whole.
    blocks.resize(static_cast<size_t>(numel * n));
    ep->all_gather(local, blocks.data(), static_cast<size_t>(numel), DType::f32);
    joined.insert(joined.end(), blocks.begin(), blocks.end());
  }
  return joined;
}

}  // namespace ndt
