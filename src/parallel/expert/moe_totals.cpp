#include "parallel/expert/moe_totals.h"

namespace ndt {

MoeJobTotals sum_moe_totals(const MoeTotals& local, int n_experts, DeviceMesh& mesh) {
  // [aux, z, dropped, assignments, tokens of expert 0 .. E-1], as f32.
  std::vector<float> v(static_cast<size_t>(4 + n_experts), 0.0f);
  if (mesh.coord(Axis::tp) == 0) {
    v[0] = static_cast<float>(local.aux_sum), v[1] = static_cast<float>(local.z_sum);
    v[2] = static_cast<float>(local.stats.dropped), v[3] = static_cast<float>(local.stats.assignments);
    for (size_t e = 0; e < local.stats.tokens_per_expert.size(); ++e) {
      v[4 + e] = static_cast<float>(local.stats.tokens_per_expert[e]);
    }
  }
  mesh.world().all_reduce(v.data(), v.size(), DType::f32, ReduceOp::sum);
  MoeJobTotals totals{v[0], v[1], v[2], v[3], {}};
  totals.tokens_per_expert.assign(v.begin() + 4, v.end());
  return totals;
}

}  // namespace ndt
