#include "plan/compute_time.h"

#include <algorithm>
#include <cmath>

namespace ndt {

double gemm_efficiency_at(const DeviceProfile& device, double m, double n, double k) {
  const std::vector<GemmEfficiencyPoint>& table = device.gemm_efficiency_by_size;
  if (table.empty()) return device.gemm_efficiency;
  const double size = std::cbrt(m * n * k);
  if (size <= table.front().size) return table.front().efficiency;
  if (size >= table.back().size) return table.back().efficiency;
  const auto above = std::upper_bound(table.begin(), table.end(), size,
                                      [](double s, const GemmEfficiencyPoint& p) { return s < p.size; });
  const GemmEfficiencyPoint& lo = *(above - 1);
  const GemmEfficiencyPoint& hi = *above;
  const double w = std::log(size / lo.size) / std::log(hi.size / lo.size);
  return lo.efficiency + w * (hi.efficiency - lo.efficiency);
}

double stage_gemm_efficiency(const DeviceProfile& device, const ModelConfig& model,
                             const std::vector<ParameterSpec>& local_specs, double tokens, double expert_rows) {
  if (device.gemm_efficiency_by_size.empty()) return device.gemm_efficiency;
  double flops = 0, seconds_at_peak = 0;  // per unit of peak
  for (const ParameterSpec& spec : local_specs) {
    const Shape& s = spec.logical_shape;
    const bool lookup = spec.name == "wpe.weight" || (spec.name == "wte.weight" && !model.tied_embeddings);
    if (lookup || s.size() < 2) continue;
    const double rows = spec.expert ? expert_rows : tokens;
    const double out = static_cast<double>(s[s.size() - 2]), in = static_cast<double>(s.back());
    // The weights: the experts' FLOPs are those of this rank's tokens, k of E experts each.
    const double f = (spec.expert ? tokens * model.moe_top_k : tokens) * out * in;
    flops += f;
    seconds_at_peak += f / gemm_efficiency_at(device, rows, out, in);
  }
  return flops > 0 ? flops / seconds_at_peak : device.gemm_efficiency;
}

double attention_rate(const DeviceProfile& device, double gemm_rate) {
  // Never above the run's GEMM rate: a GPU's figure is of bf16 attention, which an fp32
  // run does not reach.
  return device.attention_flops_per_s > 0 ? std::min(device.attention_flops_per_s, gemm_rate) : gemm_rate;
}

double elementwise_rate(const DeviceProfile& device) {
  return device.elementwise_bytes_per_s > 0 ? device.elementwise_bytes_per_s : device.memory_bytes_per_s;
}

}  // namespace ndt
