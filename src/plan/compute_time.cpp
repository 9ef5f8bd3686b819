#include "plan/compute_time.h"

#include "plan/table_lookup.h"

#include <algorithm>
#include <cmath>

namespace ndt {

double gemm_efficiency_at(const DeviceProfile& device, double m, double n, double k) {
  const std::vector<GemmEfficiencyPoint>& table = device.gemm_efficiency_by_size;
  if (table.empty()) return device.gemm_efficiency;
  return interpolate_in_log(table, std::cbrt(m * n * k), &GemmEfficiencyPoint::size, &GemmEfficiencyPoint::efficiency);
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

double attention_flops_at(const DeviceProfile& device, double seq_len) {
  const std::vector<AttentionRatePoint>& table = device.attention_by_length;
  if (table.empty()) return device.attention_flops_per_s;
  return interpolate_in_log(table, seq_len, &AttentionRatePoint::seq_len, &AttentionRatePoint::flops_per_s);
}

double attention_rate(const DeviceProfile& device, double gemm_rate, double seq_len) {
  // Never above the run's GEMM rate: a GPU's figure is of bf16 attention, which an fp32
  // run does not reach.
  const double rate = attention_flops_at(device, seq_len);
  return rate > 0 ? std::min(rate, gemm_rate) : gemm_rate;
}

double elementwise_rate(const DeviceProfile& device) {
  return device.elementwise_bytes_per_s > 0 ? device.elementwise_bytes_per_s : device.memory_bytes_per_s;
}

}  // namespace ndt
