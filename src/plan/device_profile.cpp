#include "plan/device_profile.h"

#include "core/error.h"
#include "core/input_file.h"
#include "core/system_memory.h"
#include "kernels/kernels.h"
#include "offload/disk_bandwidth.h"
#include "train/peak_flops.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

namespace ndt {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The GPUs' figures as their vendor publishes them (dense, no sparsity; memory in GiB,
// the unit the devices report). Three figures are not published for the devices and are
// assumptions: link latencies (3 us inside a node, 10 us between nodes), gemm_efficiency
// (the share of peak large bf16 GEMMs reach: 0.8 on A100, 0.75 on Hopper and Blackwell)
// and the attention core's share of the bf16 peak, from what FlashAttention kernels
// publish: 0.6 on A100 (FlashAttention-2: 50-73% of peak, Dao 2023), 0.6 on Hopper and
// Blackwell (FlashAttention-3 / cuDNN class: 75% forward, backward lower, Shah et al. 2024).
// A device file overrides any of them.
DeviceProfile gpu(const char* name, const char* source, double memory_gib, double fp32_tflops, double bf16_tflops,
                  double fp8_tflops, double memory_tb_s, double gemm_efficiency, double nvlink_gb_s,
                  double network_gbit_s, double attention_share = 0.6) {
  DeviceProfile d;
  d.name = name;
  d.source = source;
  d.memory_bytes = memory_gib * kGiB;
  d.peak_fp32 = fp32_tflops * 1e12;
  d.peak_bf16 = bf16_tflops * 1e12;
  d.peak_fp8 = fp8_tflops * 1e12;
  d.memory_bytes_per_s = memory_tb_s * 1e12;
  d.gemm_efficiency = gemm_efficiency;
  d.attention_flops_per_s = attention_share * d.peak_bf16;
  d.devices_per_node = 8;
  d.intra_node = {nvlink_gb_s * 1e9, 3e-6};
  d.inter_node = {network_gbit_s / 8 * 1e9, 10e-6};
  return d;
}

const std::map<std::string, DeviceProfile>& builtin_gpus() {
  static const std::map<std::string, DeviceProfile> gpus = {
      {"a100-80g", gpu("a100-80g",
                       "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB): 80 GB HBM2e at 2039 GB/s, 19.5 TFLOP/s fp32, "
                       "312 TFLOP/s bf16 dense, NVLink 600 GB/s (300 per direction); DGX A100: one 200 Gb/s HDR "
                       "InfiniBand port per GPU",
                       80, 19.5, 312, 0, 2.039, 0.8, 300, 200)},
      {"h100-sxm", gpu("h100-sxm",
                       "NVIDIA H100 Tensor Core GPU datasheet (SXM5): 80 GB HBM3 at 3.35 TB/s, 67 TFLOP/s fp32, 989 "
                       "TFLOP/s bf16 and 1979 TFLOP/s fp8 dense, NVLink 900 GB/s (450 per direction); DGX H100: one 400 "
                       "Gb/s NDR port per GPU",
                       80, 67, 989, 1979, 3.35, 0.75, 450, 400)},
      {"h200", gpu("h200",
                   "NVIDIA H200 Tensor Core GPU datasheet (SXM): 141 GB HBM3e at 4.8 TB/s, 67 TFLOP/s fp32, 989 TFLOP/s "
                   "bf16 and 1979 TFLOP/s fp8 dense, NVLink 900 GB/s (450 per direction); HGX H200: one 400 Gb/s port "
                   "per GPU",
                   141, 67, 989, 1979, 4.8, 0.75, 450, 400)},
      {"b200", gpu("b200",
                   "NVIDIA DGX B200 datasheet, per GPU: 180 GB HBM3e at 8 TB/s, 2.25 PFLOP/s bf16 and 4.5 PFLOP/s fp8 "
                   "dense, NVLink 5 1.8 TB/s (900 GB/s per direction), one 400 Gb/s ConnectX-7 port per GPU; fp32 75 "
                   "TFLOP/s (HGX B200)",
                   180, 75, 2250, 4500, 8.0, 0.75, 900, 400)},
  };
  return gpus;
}

// Bytes per second one thread copies (read + write counted once: the copy's size over
// its time), the median of 5 copies of 64 MiB.
double measure_copy_bandwidth() {
  const size_t bytes = size_t{64} << 20;
  std::vector<char> a(bytes, 1), b(bytes, 0);
  std::vector<double> rates;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(bytes) / s);
    a[static_cast<size_t>(r)] = b[bytes - 1 - static_cast<size_t>(r)];  // keeps the copies from being elided
  }
  std::sort(rates.begin(), rates.end());
  return rates[2];
}

// A device file's list of numbers under `key`.
std::vector<double> number_list(const std::string& path, const std::string& key, const toml::node& node) {
  const toml::array* array = node.as_array();
  NDT_CHECK(array != nullptr && !array->empty(), "device file \"{}\": {} must be a list of numbers", path, key);
  std::vector<double> values;
  for (const toml::node& item : *array) {
    const std::optional<double> v = item.value<double>();
    NDT_CHECK(v.has_value() && std::isfinite(*v), "device file \"{}\": {} must be a list of numbers", path, key);
    values.push_back(*v);
  }
  return values;
}

// The per-kind collective tables' keys: each kind's wire sizes per rank and its call
// times in microseconds there (TimedCollective order).
std::string collective_key(size_t kind, const char* what) {
  return fmt::format("{}_{}", timed_collective_name(static_cast<TimedCollective>(kind)), what);
}

// The tables from their lists (empty where the file gives none), each checked by key and index.
void read_collective_calls(const std::string& path, std::map<std::string, std::vector<double>>& lists, DeviceProfile& d) {
  for (size_t kind = 0; kind < kNumTimedCollectives; ++kind) {
    const std::string sizes_key = collective_key(kind, "wire_bytes"), times_key = collective_key(kind, "call_us");
    const std::vector<double>& sizes = lists[sizes_key];
    const std::vector<double>& times = lists[times_key];
    NDT_CHECK(times.size() == sizes.size(), "device file \"{}\": {} has {} values and {} {}: they pair up, one time per size",
              path, sizes_key, sizes.size(), times_key, times.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      NDT_CHECK(sizes[i] >= 1 && sizes[i] <= 1e12 && (i == 0 || sizes[i] > sizes[i - 1]),
                "device file \"{}\": {}[{}] = {} must lie in [1, 1e12] and exceed the size before it", path, sizes_key,
                i, sizes[i]);
      NDT_CHECK(times[i] > 0 && times[i] <= 1e9, "device file \"{}\": {}[{}] = {} must lie in (0, 1e9]", path,
                times_key, i, times[i]);
      d.collective_calls[kind].push_back({sizes[i], times[i] * 1e-6});
    }
  }
}

// The tables' keys as device_file_text writes them (the kinds measured).
std::string collective_calls_text(const DeviceProfile& d) {
  std::string text;
  for (size_t kind = 0; kind < kNumTimedCollectives; ++kind) {
    std::string sizes, times;
    for (const CollectiveCallPoint& p : d.collective_calls[kind]) {
      sizes += fmt::format("{}{:.0f}", sizes.empty() ? "" : ", ", p.wire_bytes);
      times += fmt::format("{}{:.6g}", times.empty() ? "" : ", ", p.seconds * 1e6);
    }
    if (!sizes.empty()) {
      text += fmt::format("{} = [{}]\n{} = [{}]\n", collective_key(kind, "wire_bytes"), sizes,
                          collective_key(kind, "call_us"), times);
    }
  }
  return text;
}

}  // namespace

double DeviceProfile::peak_flops(DType compute, bool fp8) const {
  if (fp8 && peak_fp8 > 0) return peak_fp8;
  return compute == DType::f32 ? peak_fp32 : peak_bf16;
}

const char* timed_collective_name(TimedCollective kind) {
  switch (kind) {
    case TimedCollective::all_reduce: return "all_reduce";
    case TimedCollective::reduce_scatter: return "reduce_scatter";
    case TimedCollective::all_gather: return "all_gather";
    case TimedCollective::all_to_all: return "all_to_all";
  }
  return "unknown";
}

void DeviceProfile::validate() const {
  const auto positive = [&](const char* key, double v) {
    NDT_CHECK(std::isfinite(v) && v > 0, "device profile \"{}\": {} = {} must be positive", name, key, v);
  };
  positive("memory", memory_bytes);
  positive("peak fp32", peak_fp32);
  positive("peak bf16", peak_bf16);
  positive("memory bandwidth", memory_bytes_per_s);
  positive("intra-node bandwidth", intra_node.bytes_per_s);
  positive("inter-node bandwidth", inter_node.bytes_per_s);
  NDT_CHECK(peak_fp8 >= 0, "device profile \"{}\": peak fp8 = {} must not be negative (0: none)", name, peak_fp8);
  NDT_CHECK(gemm_efficiency > 0 && gemm_efficiency <= 1, "device profile \"{}\": gemm_efficiency = {} must lie in (0, 1]",
            name, gemm_efficiency);
  NDT_CHECK(devices_per_node >= 1, "device profile \"{}\": devices_per_node = {} must be at least 1", name,
            devices_per_node);
  NDT_CHECK(std::isfinite(oversubscription) && oversubscription >= 1,
            "device profile \"{}\": oversubscription = {} must be at least 1 (1: every rank has its own cores)", name,
            oversubscription);
  NDT_CHECK(inter_node_links >= 0, "device profile \"{}\": inter_node_links = {} must not be negative (0: one per device)",
            name, inter_node_links);
  NDT_CHECK(intra_node.latency_s >= 0 && inter_node.latency_s >= 0, "device profile \"{}\": latencies must not be negative",
            name);
  NDT_CHECK(std::isfinite(disk_bytes_per_s) && disk_bytes_per_s >= 0,
            "device profile \"{}\": disk bandwidth = {} must not be negative (0: no disk tier)", name, disk_bytes_per_s);
  NDT_CHECK(intra_node.call_s >= 0 && inter_node.call_s >= 0, "device profile \"{}\": per-call costs must not be negative",
            name);
  NDT_CHECK(attention_flops_per_s >= 0 && elementwise_bytes_per_s >= 0 && optimizer_bytes_per_s >= 0 &&
                fma_flops_per_s >= 0,
            "device profile \"{}\": attention, elementwise and optimizer rates must not be negative (0: not given)",
            name);
  for (size_t i = 0; i < gemm_efficiency_by_size.size(); ++i) {
    const GemmEfficiencyPoint& p = gemm_efficiency_by_size[i];
    NDT_CHECK(p.size > 0 && (i == 0 || p.size > gemm_efficiency_by_size[i - 1].size),
              "device profile \"{}\": gemm size {} must be positive and larger than the one before", name, p.size);
    NDT_CHECK(p.efficiency > 0 && p.efficiency <= 1, "device profile \"{}\": gemm efficiency {} at size {} must lie in (0, 1]",
              name, p.efficiency, p.size);
  }
  for (size_t kind = 0; kind < kNumTimedCollectives; ++kind) {
    const std::vector<CollectiveCallPoint>& table = collective_calls[kind];
    for (size_t i = 0; i < table.size(); ++i) {
      NDT_CHECK(table[i].wire_bytes > 0 && (i == 0 || table[i].wire_bytes > table[i - 1].wire_bytes) &&
                    table[i].seconds > 0,
                "device profile \"{}\": {} call of {} wire bytes ({} s): sizes must be positive and ascending, times "
                "positive",
                name, timed_collective_name(static_cast<TimedCollective>(kind)), table[i].wire_bytes, table[i].seconds);
    }
  }
  for (size_t i = 0; i < attention_by_length.size(); ++i) {
    const AttentionRatePoint& p = attention_by_length[i];
    NDT_CHECK(p.seq_len > 0 && (i == 0 || p.seq_len > attention_by_length[i - 1].seq_len) && p.flops_per_s > 0,
              "device profile \"{}\": attention at sequence length {} ({} FLOP/s): lengths must be positive and ascending, "
              "rates positive",
              name, p.seq_len, p.flops_per_s);
  }
}

std::vector<std::string> builtin_device_names() {
  std::vector<std::string> names;
  for (const auto& [name, profile] : builtin_gpus()) names.push_back(name);
  names.push_back("cpu");
  return names;
}

DeviceProfile builtin_device(const std::string& name) {
  if (name == "cpu") return measure_cpu_device(1);
  const auto it = builtin_gpus().find(name);
  NDT_CHECK(it != builtin_gpus().end(), "--device \"{}\" is not a device profile: the built-in ones are {}, or give a "
            "TOML file describing the device (docs/planner.md)",
            name, fmt::join(builtin_device_names(), ", "));
  return it->second;
}

DeviceProfile measure_cpu_device(int devices_per_node, const std::string& disk_dir) {
  NDT_CHECK(devices_per_node >= 1, "devices per node = {} must be at least 1", devices_per_node);
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const double share = static_cast<double>(cores) / devices_per_node;  // cores per rank (below 1: oversubscribed)
  const int previous_threads = kernels::num_threads();
  kernels::set_num_threads(1);
  const double fma = measure_fma_peak(1);
  const double sgemm = measure_sgemm_flops(512, 512, 512, 5);
  kernels::set_num_threads(previous_threads);
  const double copy = measure_copy_bandwidth();
  const offload::DiskBandwidth disk =
      offload::measure_disk_bandwidth(disk_dir, int64_t{256} << 20, int64_t{4} << 20, offload::IoBackend::io_uring, 8);
  DeviceProfile d;
  d.name = "cpu";
  d.memory_bytes = physical_memory_bytes() / devices_per_node;
  d.peak_fp32 = fma * share;
  d.peak_bf16 = d.peak_fp32;  // the planner's CPU runs compute in fp32
  d.gemm_efficiency = std::min(1.0, sgemm / fma);
  d.memory_bytes_per_s = copy * std::min(1.0, share);
  d.devices_per_node = devices_per_node;
  // oversubscription stays 1 here (no bubble lent): with it, `--layout auto` on 4 ranks of
  // the 2-core development VM would move gpt2-124m from tp 4 to pp 2 x tp 2, a choice not
  // yet measured against the hand-chosen layouts (docs/planner.md). Calibrated files carry it.
  // Ranks on one machine talk through shared memory: a message is copied in and out.
  d.intra_node = {copy / 2 * std::min(1.0, share), 2e-6};
  d.inter_node = d.intra_node;  // one machine: no network
  d.inter_node_links = 1;         // hosts of this kind have one network interface
  d.overlaps_communication = false;
  d.disk_bytes_per_s = disk.mixed_bytes_per_s() / devices_per_node;  // the ranks share the disk
  d.source = fmt::format("measured on this machine ({} cores, {} rank{} sharing them): FMA peak {:.1f} GFLOP/s per core, "
                         "sgemm 512^3 at {:.0f}% of it, memory copy {:.1f} GB/s, disk ({}{}) write {:.2f} GB/s, read "
                         "{:.2f} GB/s",
                         cores, devices_per_node, devices_per_node == 1 ? "" : "s", fma / 1e9, 100 * sgemm / fma,
                         copy / 1e9, disk_dir, disk.direct ? ", O_DIRECT" : ", page cache", disk.write_bytes_per_s / 1e9,
                         disk.read_bytes_per_s / 1e9);
  return d;
}

DeviceProfile load_device_profile(const std::string& path) {
  const std::string problem = input_file_problem(path);
  NDT_CHECK(problem.empty(), "device file \"{}\" {}", path, problem);
  toml::table table;
  try {
    table = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    fail("device file \"{}\": {} (line {})", path, e.description(), e.source().begin.line);
  }
  // key -> (target, scale to SI units, required, the range in the file's units). The
  // ranges reach far past any device built, and keep every product the planner forms
  // with the cluster's devices finite.
  DeviceProfile d;
  d.name = path;
  d.source = "device file " + path;
  struct Key {
    double* target;
    double scale;
    bool required;
    double min, max;
    bool min_allowed;  // min itself is valid (0 for optional figures), else only above it
  };
  double devices_per_node = 8, overlap = 1, links = 0;
  const std::map<std::string, Key> keys = {
      {"memory_gib", {&d.memory_bytes, kGiB, true, 0, 1e6, false}},
      {"peak_tflops_fp32", {&d.peak_fp32, 1e12, true, 0, 1e6, false}},
      {"peak_tflops_bf16", {&d.peak_bf16, 1e12, true, 0, 1e6, false}},
      {"peak_tflops_fp8", {&d.peak_fp8, 1e12, false, 0, 1e6, true}},
      {"memory_bandwidth_gb_s", {&d.memory_bytes_per_s, 1e9, true, 0, 1e6, false}},
      {"gemm_efficiency", {&d.gemm_efficiency, 1, false, 0, 1, false}},
      {"devices_per_node", {&devices_per_node, 1, false, 1, 65536, true}},
      {"oversubscription", {&d.oversubscription, 1, false, 1, 65536, true}},
      {"intra_node_gb_s", {&d.intra_node.bytes_per_s, 1e9, true, 0, 1e6, false}},
      {"intra_node_latency_us", {&d.intra_node.latency_s, 1e-6, false, 0, 1e6, true}},
      {"inter_node_gb_s", {&d.inter_node.bytes_per_s, 1e9, true, 0, 1e6, false}},
      {"inter_node_latency_us", {&d.inter_node.latency_s, 1e-6, false, 0, 1e6, true}},
      {"overlaps_communication", {&overlap, 1, false, 0, 1, true}},
      {"disk_gb_s", {&d.disk_bytes_per_s, 1e9, false, 0, 1e6, true}},
      {"inter_node_links", {&links, 1, false, 0, 65536, true}},
      {"intra_node_call_us", {&d.intra_node.call_s, 1e-6, false, 0, 1e6, true}},
      {"inter_node_call_us", {&d.inter_node.call_s, 1e-6, false, 0, 1e6, true}},
      {"attention_gflops", {&d.attention_flops_per_s, 1e9, false, 0, 1e9, true}},
      {"fma_gflops", {&d.fma_flops_per_s, 1e9, false, 0, 1e9, true}},
      {"elementwise_gb_s", {&d.elementwise_bytes_per_s, 1e9, false, 0, 1e6, true}},
      {"optimizer_gb_s", {&d.optimizer_bytes_per_s, 1e9, false, 0, 1e6, true}},
  };
  // Lists: each pairs up with the other of its table.
  std::map<std::string, std::vector<double>> lists = {
      {"gemm_sizes", {}}, {"gemm_efficiencies", {}}, {"attention_seq_lens", {}}, {"attention_gflops_by_seq", {}}};
  for (size_t kind = 0; kind < kNumTimedCollectives; ++kind) {
    lists[collective_key(kind, "wire_bytes")] = {}, lists[collective_key(kind, "call_us")] = {};
  }
  std::vector<std::string> known;
  for (const auto& [key, list] : lists) known.push_back(key);
  for (const auto& [key, k] : keys) known.push_back(key);
  for (const auto& [key, node] : table) {
    const std::string k(key.str());
    if (k == "name") {
      NDT_CHECK(node.is_string(), "device file \"{}\": name must be a string", path);
      d.name = node.value<std::string>().value_or(path);
      continue;
    }
    if (lists.contains(k)) {
      lists[k] = number_list(path, k, node);
      continue;
    }
    const auto it = keys.find(k);
    NDT_CHECK(it != keys.end(), "device file \"{}\": unknown key \"{}\" (known: name, {})", path, k, fmt::join(known, ", "));
    const std::optional<double> v = node.is_boolean() ? std::optional<double>(node.value<bool>().value_or(false))
                                                      : node.value<double>();
    NDT_CHECK(v.has_value(), "device file \"{}\": {} must be a number", path, k);
    const Key& r = it->second;
    // Checked in the file's own units, under the file's own key, before any scaling.
    NDT_CHECK(std::isfinite(*v) && (r.min_allowed ? *v >= r.min : *v > r.min) && *v <= r.max,
              "device file \"{}\": {} = {} must lie in {}{}, {}]", path, k, *v, r.min_allowed ? "[" : "(", r.min, r.max);
    *r.target = *v * r.scale;
  }
  for (const auto& [key, k] : keys) {
    NDT_CHECK(!k.required || table.contains(key), "device file \"{}\" does not give {} (required: memory_gib, "
              "peak_tflops_fp32, peak_tflops_bf16, memory_bandwidth_gb_s, intra_node_gb_s, inter_node_gb_s)",
              path, key);
  }
  NDT_CHECK(devices_per_node == std::floor(devices_per_node),
            "device file \"{}\": devices_per_node = {} must be a whole number", path, devices_per_node);
  d.devices_per_node = static_cast<int>(devices_per_node);
  NDT_CHECK(links == std::floor(links), "device file \"{}\": inter_node_links = {} must be a whole number", path, links);
  d.inter_node_links = static_cast<int>(links);
  d.overlaps_communication = overlap != 0;
  const std::vector<double>& gemm_sizes = lists["gemm_sizes"];
  const std::vector<double>& gemm_efficiencies = lists["gemm_efficiencies"];
  NDT_CHECK(gemm_sizes.size() == gemm_efficiencies.size(),
            "device file \"{}\": gemm_sizes has {} values and gemm_efficiencies {}: they pair up, one efficiency per size",
            path, gemm_sizes.size(), gemm_efficiencies.size());
  for (size_t i = 0; i < gemm_sizes.size(); ++i) {
    NDT_CHECK(gemm_sizes[i] > 0 && gemm_sizes[i] <= 1e6 && (i == 0 || gemm_sizes[i] > gemm_sizes[i - 1]),
              "device file \"{}\": gemm_sizes[{}] = {} must lie in (0, 1000000] and exceed the size before it", path, i,
              gemm_sizes[i]);
    NDT_CHECK(gemm_efficiencies[i] > 0 && gemm_efficiencies[i] <= 1,
              "device file \"{}\": gemm_efficiencies[{}] = {} must lie in (0, 1]", path, i, gemm_efficiencies[i]);
    d.gemm_efficiency_by_size.push_back({gemm_sizes[i], gemm_efficiencies[i]});
  }
  const std::vector<double>& lengths = lists["attention_seq_lens"];
  const std::vector<double>& rates = lists["attention_gflops_by_seq"];
  NDT_CHECK(lengths.size() == rates.size(),
            "device file \"{}\": attention_seq_lens has {} values and attention_gflops_by_seq {}: they pair up, one rate "
            "per length",
            path, lengths.size(), rates.size());
  for (size_t i = 0; i < lengths.size(); ++i) {
    NDT_CHECK(lengths[i] >= 1 && lengths[i] <= 1e9 && (i == 0 || lengths[i] > lengths[i - 1]),
              "device file \"{}\": attention_seq_lens[{}] = {} must lie in [1, 1e9] and exceed the length before it", path,
              i, lengths[i]);
    NDT_CHECK(rates[i] > 0 && rates[i] <= 1e9, "device file \"{}\": attention_gflops_by_seq[{}] = {} must lie in (0, 1e9]",
              path, i, rates[i]);
    d.attention_by_length.push_back({lengths[i], rates[i] * 1e9});
  }
  read_collective_calls(path, lists, d);
  d.validate();
  return d;
}

std::string device_file_text(const DeviceProfile& d, const std::string& comment) {
  std::string text;
  for (size_t start = 0; start < comment.size();) {
    const size_t end = std::min(comment.find('\n', start), comment.size());
    text += "# " + comment.substr(start, end - start) + "\n";
    start = end + 1;
  }
  std::string sizes, efficiencies;
  for (const GemmEfficiencyPoint& p : d.gemm_efficiency_by_size) {
    sizes += fmt::format("{}{:g}", sizes.empty() ? "" : ", ", p.size);
    efficiencies += fmt::format("{}{:.4f}", efficiencies.empty() ? "" : ", ", p.efficiency);
  }
  text += fmt::format("name = \"{}\"\nmemory_gib = {:.6g}\npeak_tflops_fp32 = {:.6g}\npeak_tflops_bf16 = {:.6g}\n"
                      "peak_tflops_fp8 = {:.6g}\nmemory_bandwidth_gb_s = {:.6g}\ngemm_efficiency = {:.4f}\n",
                      d.name, d.memory_bytes / kGiB, d.peak_fp32 / 1e12, d.peak_bf16 / 1e12, d.peak_fp8 / 1e12,
                      d.memory_bytes_per_s / 1e9, d.gemm_efficiency);
  if (!sizes.empty()) text += fmt::format("gemm_sizes = [{}]\ngemm_efficiencies = [{}]\n", sizes, efficiencies);
  std::string lengths, rates;
  for (const AttentionRatePoint& p : d.attention_by_length) {
    lengths += fmt::format("{}{:g}", lengths.empty() ? "" : ", ", p.seq_len);
    rates += fmt::format("{}{:.6g}", rates.empty() ? "" : ", ", p.flops_per_s / 1e9);
  }
  if (!lengths.empty()) text += fmt::format("attention_seq_lens = [{}]\nattention_gflops_by_seq = [{}]\n", lengths, rates);
  text += fmt::format(
      "attention_gflops = {:.6g}\nelementwise_gb_s = {:.6g}\noptimizer_gb_s = {:.6g}\nfma_gflops = {:.6g}\n"
      "devices_per_node = {}\noversubscription = {:.6g}\n",
      d.attention_flops_per_s / 1e9, d.elementwise_bytes_per_s / 1e9, d.optimizer_bytes_per_s / 1e9,
      d.fma_flops_per_s / 1e9, d.devices_per_node, d.oversubscription);
  for (const auto& [prefix, link] : {std::pair{"intra_node", d.intra_node}, std::pair{"inter_node", d.inter_node}}) {
    text += fmt::format("{0}_gb_s = {1:.6g}\n{0}_latency_us = {2:.6g}\n{0}_call_us = {3:.6g}\n", prefix,
                        link.bytes_per_s / 1e9, link.latency_s * 1e6, link.call_s * 1e6);
  }
  text += collective_calls_text(d);
  text += fmt::format("inter_node_links = {}\noverlaps_communication = {}\ndisk_gb_s = {:.6g}\n", d.inter_node_links,
                      d.overlaps_communication, d.disk_bytes_per_s / 1e9);
  return text;
}

DeviceProfile resolve_device(const std::string& name_or_file) {
  const bool file = name_or_file.find('/') != std::string::npos ||
                    (name_or_file.size() > 5 && name_or_file.ends_with(".toml"));
  return file ? load_device_profile(name_or_file) : builtin_device(name_or_file);
}

Cluster make_cluster(const DeviceProfile& device, int nodes, int devices_per_node, int devices) {
  NDT_CHECK(nodes >= 0 && devices_per_node >= 0 && devices >= 0,
            "cluster sizes must not be negative: --nodes {}, --devices-per-node {}, --devices {}", nodes,
            devices_per_node, devices);
  Cluster c;
  c.device = device;
  if (devices_per_node == 0) {
    devices_per_node = nodes > 0 && devices > 0 ? 0 : device.devices_per_node;
    if (devices_per_node == 0) {
      NDT_CHECK(devices % nodes == 0, "--devices {} does not split over --nodes {}", devices, nodes);
      devices_per_node = devices / nodes;
    }
  }
  if (nodes == 0) {
    if (devices == 0) devices = devices_per_node;
    NDT_CHECK(devices % devices_per_node == 0,
              "--devices {} is not a whole number of nodes of {} devices (--devices-per-node, or the profile's {})",
              devices, devices_per_node, device.devices_per_node);
    nodes = devices / devices_per_node;
  }
  const int64_t product = int64_t{nodes} * devices_per_node;  // 64-bit: two ints' product
  NDT_CHECK(devices == 0 || product == devices,
            "contradictory cluster sizes: --nodes {} x --devices-per-node {} = {} devices, but --devices {}", nodes,
            devices_per_node, product, devices);
  NDT_CHECK(product <= kMaxClusterDevices,
            "--nodes {} x --devices-per-node {} = {} devices: more than the planner's {} (ten times the largest "
            "clusters built)",
            nodes, devices_per_node, product, kMaxClusterDevices);
  c.nodes = nodes;
  c.devices_per_node = devices_per_node;
  c.device.validate();
  return c;
}

}  // namespace ndt
