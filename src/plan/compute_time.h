// The step-time model's compute, kernel by kind: the matmuls at the device's GEMM rate,
// each GEMM at the efficiency of its size when the device gives a table (a calibrated
// device: plan/calibration.h), the attention core at its own rate, and the kernels
// between the matmuls (norms, activations, residual adds) by the bytes they move.
// A device without those figures prices everything as before: matmuls and attention at
// peak x gemm_efficiency, the rest at the memory bandwidth. docs/planner.md "Step time".
#pragma once

#include "model/config.h"
#include "model/parameter.h"
#include "plan/device_profile.h"

#include <vector>

namespace ndt {

// The share of the peak an m x n x k GEMM reaches: the table's value at the cube root
// of m n k (interpolated in log size between points, held at the ends), or the device's
// single gemm_efficiency without a table.
double gemm_efficiency_at(const DeviceProfile& device, double m, double n, double k);

// The efficiency of a stage's matmuls as one figure: the FLOP-weighted harmonic mean of
// gemm_efficiency_at over its weight matrices (`local_specs`: one tp rank's), each a
// GEMM of `tokens` rows, an expert's of `expert_rows`. Embedding lookups and vectors are
// not matmuls; a stage with none gives the device's gemm_efficiency.
double stage_gemm_efficiency(const DeviceProfile& device, const ModelConfig& model,
                             const std::vector<ParameterSpec>& local_specs, double tokens, double expert_rows);

// FLOP/s of the attention core at sequence length `seq_len` (the query block of one
// kernel call): the device's table interpolated in log length, held at its ends, or its
// single figure without a table (0: not given).
double attention_flops_at(const DeviceProfile& device, double seq_len);

// The attention core's FLOP/s in a run: attention_flops_at, at most `gemm_rate` (the
// run's); `gemm_rate` where the device does not give it.
double attention_rate(const DeviceProfile& device, double gemm_rate, double seq_len);

// Bytes per second of the kernels between the matmuls.
double elementwise_rate(const DeviceProfile& device);

}  // namespace ndt
