// What the planner knows about hardware: a device (memory, peak FLOP/s per dtype, memory
// bandwidth, how much of the peak large GEMMs reach) and its links (inside a node and
// between nodes: bandwidth and latency), and the cluster built from it. Built-in
// profiles carry the vendors' published figures (each with its source); this machine's
// CPU profile is measured when asked for; a TOML file describes other hardware
// (docs/planner.md has its keys).
#pragma once

#include "core/dtype.h"

#include <array>
#include <string>
#include <vector>

namespace ndt {

struct LinkProfile {
  double bytes_per_s = 0;  // per direction: of one device's share inside a node, of one link between nodes
  double latency_s = 0;    // per message hop
  // Per call of a collective or message, whatever its size and group (beyond the hops'
  // latency): on a CPU, MPI's own work on the computing core (entering the library,
  // matching, packing). Measured by `ndtrain plan --calibrate`; 0 elsewhere.
  double call_s = 0;
};

// A GEMM's share of the peak by its size: (the cube root of m x n x k, efficiency),
// sizes ascending; measured by `ndtrain plan --calibrate` (plan/calibration.h).
struct GemmEfficiencyPoint {
  double size = 0;
  double efficiency = 1;
};

// The attention core's rate at a sequence length (the query block a rank's kernel call
// covers), lengths ascending; measured by `ndtrain plan --calibrate`.
struct AttentionRatePoint {
  double seq_len = 0;
  double flops_per_s = 0;
};

// The collectives a calibrated device times per call (all_to_all also prices
// all_to_all_v), and one call's seconds at a wire size per rank (the counters' wire bytes:
// comm/communicator.h).
enum class TimedCollective { all_reduce, reduce_scatter, all_gather, all_to_all };
inline constexpr size_t kNumTimedCollectives = 4;
const char* timed_collective_name(TimedCollective kind);  // "all_reduce", "reduce_scatter", ...
struct CollectiveCallPoint {
  double wire_bytes = 0;
  double seconds = 0;
};

struct DeviceProfile {
  std::string name;
  std::string source;  // where the figures come from
  double memory_bytes = 0;
  double peak_fp32 = 0;  // dense FLOP/s
  double peak_bf16 = 0;
  double peak_fp8 = 0;  // 0: no fp8 units
  double memory_bytes_per_s = 0;
  // The share of the peak large GEMMs reach in practice (a matmul's time is its FLOPs over
  // peak x gemm_efficiency): measured for this CPU, an assumption for the GPUs.
  double gemm_efficiency = 1;
  // When given (a calibrated device), a GEMM's efficiency by its size instead, looked up
  // between the points (plan/compute_time.h); empty: gemm_efficiency for every GEMM.
  std::vector<GemmEfficiencyPoint> gemm_efficiency_by_size;
  // The attention core (scores, softmax, weighted sum; forward and backward) in FLOP/s
  // as the model counts its FLOPs; 0: at the GEMM rate (peak x gemm_efficiency).
  double attention_flops_per_s = 0;
  // When given (a calibrated device), the attention core's rate by sequence length
  // instead, looked up between the points (plan/compute_time.h).
  std::vector<AttentionRatePoint> attention_by_length;
  // The FMA loop's rate per rank when the device was calibrated (train/peak_flops.h, the
  // figure a run measures at its start): --validate sets a run's own measurement against
  // it to see how much of the machine the run had then; 0: not calibrated.
  double fma_flops_per_s = 0;
  // Bytes per second the kernels between the matmuls (norms, activations, residual adds)
  // move through the activations; 0: memory_bytes_per_s.
  double elementwise_bytes_per_s = 0;
  // Bytes per second the optimizer step moves (AdamW: 28 bytes of fp32 state per
  // parameter read and written, the gradient norm's 4 read, and a low-precision compute
  // copy written); 0: memory_bytes_per_s.
  double optimizer_bytes_per_s = 0;
  int devices_per_node = 1;
  // The threads of a node's ranks per core (ranks x threads over cores, at least 1): above
  // 1 the ranks share cores, as 4 ranks on this 2-core VM do, and a rank that idles in the
  // pipeline's bubble lends its core to the ranks that compute (plan/planner.cpp,
  // `shared_core_step`). 1: every rank has its own cores (GPUs, CPUs not oversubscribed,
  // and the `cpu` profile, which does not lend: measure_cpu_device).
  double oversubscription = 1;
  LinkProfile intra_node, inter_node;
  // When given (a calibrated device), one call's seconds by kind at a few wire sizes per
  // rank (ascending), measured among devices_per_node ranks on one node: a collective of
  // that kind over such a group is priced from its table (plan/comm_time.h) instead of
  // intra_node's alpha-beta. MPI's kinds differ more than the alpha-beta says (2 ranks of
  // the development VM: a 1 MiB reduce-scatter took 2.7x an all-reduce of 1 MiB).
  std::array<std::vector<CollectiveCallPoint>, kNumTimedCollectives> collective_calls;
  // Links out of a node, each of inter_node's bandwidth, shared by the transfers leaving
  // the node at once (plan/comm_time.h). 0: one per device (a GPU node's NIC per GPU);
  // the cpu profile: 1 (a host's one network interface).
  int inter_node_links = 0;
  // Whether collectives run beside compute (GPUs: copy engines and NVLink, NCCL) or take
  // the compute's own cores (a CPU's ranks copy through shared memory themselves).
  bool overlaps_communication = true;
  // The offload tier (docs/offload.md): each device's share of the disk's bandwidth for
  // swap files, mixed reads and writes; 0: no disk tier known (offload is not planned).
  double disk_bytes_per_s = 0;

  // The matmul peak of a run computing in `compute` (fp8: its linear layers in fp8).
  double peak_flops(DType compute, bool fp8) const;
  void validate() const;  // throws naming the field and value
};

// a100-80g, h100-sxm, h200, b200, and cpu (this machine, measured: about a second).
std::vector<std::string> builtin_device_names();
// Throws naming the unknown profile and the known ones.
DeviceProfile builtin_device(const std::string& name);
// This machine's CPU as `devices_per_node` ranks sharing its cores: per rank, the FMA
// peak and the share of it sgemm reaches, memory bandwidth, the shared-memory link MPI
// uses between ranks, and the disk under `disk_dir` as offload moves swap files
// (offload/disk_bandwidth.h: 256 MiB written and read back there), each measured.
DeviceProfile measure_cpu_device(int devices_per_node, const std::string& disk_dir = "/tmp");
// A profile from a TOML file (keys in docs/planner.md); unknown keys and missing
// required ones are errors naming them.
DeviceProfile load_device_profile(const std::string& path);
// The device file that load_device_profile reads back as `d` (every key it knows;
// `comment` heads it as TOML comments).
std::string device_file_text(const DeviceProfile& d, const std::string& comment);
// `name_or_file`: a built-in name, or a path to a TOML file (anything with a '/' or
// ending in .toml).
DeviceProfile resolve_device(const std::string& name_or_file);

// The most devices a cluster may have (2^21 = 2097152, ten times the largest clusters
// built): device counts and their products with per-device figures stay exact.
inline constexpr int64_t kMaxClusterDevices = int64_t{1} << 21;

struct Cluster {
  DeviceProfile device;
  int nodes = 1;
  int devices_per_node = 1;
  // What the plan assumes of an MoE model's routing under ep: the most loaded ep rank's
  // expert-side rows over the mean rank's (1: balanced; `ndtrain plan --expert-load`).
  // Not a property of the hardware, but every scoring call takes the cluster.
  double expert_load = 1;
  int devices() const { return nodes * devices_per_node; }  // at most kMaxClusterDevices (make_cluster)
};

// nodes, devices_per_node and devices: any two fix the third (0: not given; none given:
// one node of the profile's devices_per_node). Throws when the sizes contradict each
// other (nodes x devices_per_node != devices, computed in 64 bits), do not divide, or
// make more than kMaxClusterDevices.
Cluster make_cluster(const DeviceProfile& device, int nodes, int devices_per_node, int devices);

}  // namespace ndt
