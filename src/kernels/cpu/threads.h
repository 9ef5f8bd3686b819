// Thread count for CPU kernels: one OpenMP pool shared by our loops and by OpenBLAS
// (the OpenMP build), so a single setting controls all compute threads of a rank.
#pragma once

namespace ndt::cpu {

void set_num_threads(int n);  // n >= 1
int num_threads();

}  // namespace ndt::cpu
