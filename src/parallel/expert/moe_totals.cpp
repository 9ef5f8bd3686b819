#include "parallel/expert/moe_totals.h"

namespace ndt {

MoeJobTotals sum_moe_totals(const MoeTotals& local, int n_experts, DeviceMesh& mesh) {
  // [aux, z, dropped, assignments, expert rows, most loaded rows, tokens of expert 0 ..
  // E-1], as f32.
  constexpr size_t kCounts = 6;
  std::vector<float> v(kCounts + static_cast<size_t>(n_experts), 0.0f);
  if (mesh.coord(Axis::tp) == 0) {
    v[0] = static_cast<float>(local.aux_sum), v[1] = static_cast<float>(local.z_sum);
    v[2] = static_cast<float>(local.stats.dropped), v[3] = static_cast<float>(local.stats.assignments);
    v[4] = static_cast<float>(local.stats.expert_rows), v[5] = static_cast<float>(local.stats.most_loaded_rows);
    for (size_t e = 0; e < local.stats.tokens_per_expert.size(); ++e) {
      v[kCounts + e] = static_cast<float>(local.stats.tokens_per_expert[e]);
    }
  }
  mesh.world().all_reduce(v.data(), v.size(), DType::f32, ReduceOp::sum);
  MoeJobTotals totals{v[0], v[1], v[2], v[3], {}};
  totals.tokens_per_expert.assign(v.begin() + kCounts, v.end());
  if (v[4] > 0) totals.expert_load = static_cast<double>(v[5]) / v[4];
  return totals;
}

}  // namespace ndt
