// `ndtrain plan --calibrate`: the step-time model's constants measured on this machine
// as N ranks share it, written as a device file (docs/planner.md "Calibrating"). Every
// rank measures at once, under the thread layout a run of N ranks takes (cores / N
// threads each), so each figure is one rank's share:
//   FMA peak             the vector FMA loop (peak_tflops_fp32)
//   GEMM efficiency      a linear layer's three GEMMs (forward, input and weight
//                        gradients) of m = 4s rows at s = 32 .. 512, each over the FMA
//                        peak, keyed by the cube root of m n k (gemm_sizes/efficiencies)
//   attention            the causal attention core forward and backward (attention_gflops)
//   elementwise          layer norm and GELU forward and backward (elementwise_gb_s)
//   optimizer            AdamW over 8M parameters (optimizer_gb_s)
//   copy                 a 64 MiB memcpy (memory_bandwidth_gb_s)
//   collectives          MPI all-reduce of one float (the per-call cost) and of 4 MiB
//                        (the bandwidth of the wire bytes), on the N ranks
//   bf16 GEMM            where the CPU multiplies bf16 natively (oneDNN): a 2048^3 GEMM
// The compute figures are the ranks' mean; a run of the same N ranks then meets
// `--validate`'s bound (plan/validation.h).
#pragma once

#include "plan/device_profile.h"

#include <string>

namespace ndt {

// Measures on `ranks` ranks of this machine (started under mpirun for more than one,
// printing progress) and writes the device file to `out`; returns its profile.
DeviceProfile run_calibration(int ranks, const std::string& out);

// The measuring side, on every rank of the job (`ndtrain plan --calibrate-rank`): rank 0
// prints the progress and writes the device file to `out`.
void calibrate_ranks(const std::string& out);

}  // namespace ndt
