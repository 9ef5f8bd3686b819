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
//   optimizer            AdamW over 8M parameters, each call after a 64 MiB copy
//                        (optimizer_gb_s)
//   copy                 a 64 MiB memcpy (memory_bandwidth_gb_s)
//   collectives          MPI all-reduce of one float (the per-call cost) and of 4 MiB
//                        (the bandwidth of the wire bytes), on the N ranks; and each
//                        kind's call (all-reduce, reduce-scatter, all-gather, all-to-all)
//                        at 64 B to 16 MiB of wire bytes per rank (*_wire_bytes,
//                        *_call_us)
//   bf16 GEMM            where the CPU multiplies bf16 natively (oneDNN): a 2048^3 GEMM
// The compute figures up to the copy are each the mean of five passes through them all
// (the FMA loop's too: a validation's load factor divides by it), in each pass the slowest
// rank's. `--validate` holds a run of the same N ranks to them (plan/validation.h).
#pragma once

#include "comm/communicator.h"
#include "plan/device_profile.h"

#include <string>
#include <vector>

namespace ndt {

// One linear layer of width s as the calibration times it: X (m = 4s rows by s), W (s by
// s); forward Y = X W^T, the input gradient dX = Y W (written over X, so that the next
// call reads what this one left, as a run's next layer does) and the weight gradient
// dW = Y^T X. W holds 1/s, so X keeps its magnitude from call to call: with 0.02, X
// shrank 0.41x a call at s = 32 into denormals (the GEMMs ran 10-100x slower: 0.005-0.07
// of the FMA peak against 0.48 on the development VM) and grew into infinities at s >= 64.
struct CalibrationLayer {
  explicit CalibrationLayer(int width);
  void forward_and_backward();
  int s;
  std::vector<float> x, w, y, dw;
};

// Measures on `ranks` ranks of this machine (started under mpirun for more than one,
// printing progress) and writes the device file to `out`; returns its profile.
DeviceProfile run_calibration(int ranks, const std::string& out);

// Each of the ranks' rates (higher is faster) replaced by the slowest rank's, on every
// rank: ranks that synchronise run at its pace. (A DDP step on 2 ranks sharing 2 cores
// spent 0.016 s in its all-reduces in one run and 0.048 s in the next, where the bytes
// take about 4 ms: the rest was waiting for the other rank.)
void keep_slowest_rank(Communicator& world, std::vector<float>& rates);

// The measuring side, on every rank of the job (`ndtrain plan --calibrate-rank`): rank 0
// prints the progress and writes the device file to `out`.
void calibrate_ranks(const std::string& out);

}  // namespace ndt
