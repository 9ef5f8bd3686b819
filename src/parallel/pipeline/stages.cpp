#include "parallel/pipeline/stages.h"

#include "core/error.h"
#include "core/text_list.h"
#include "model/block.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>

namespace ndt {

int PipelineStages::chunk_of_unit(int unit) const {
  for (int c = 0; c < chunks(); ++c) {
    if (unit < first_unit[static_cast<size_t>(c) + 1]) return c;
  }
  fail("unit {} is outside the {} units of the pipeline", unit, first_unit.back());
}

std::vector<char> PipelineStages::local_units(int rank, const PipelineShape& shape) const {
  NDT_CHECK(shape.chunks() == chunks(), "pipeline: {} chunks of units for pp x v = {}", chunks(), shape.chunks());
  std::vector<char> local(static_cast<size_t>(first_unit.back()), 0);
  for (int c : shape.chunks_of(rank)) {
    for (int u = first_unit[static_cast<size_t>(c)]; u < first_unit[static_cast<size_t>(c) + 1]; ++u) {
      local[static_cast<size_t>(u)] = 1;
    }
  }
  return local;
}

std::string PipelineStages::describe() const {
  std::string out;
  for (int c = 0; c < chunks(); ++c) {
    out += fmt::format("{}units {}-{}", c == 0 ? "" : " | ", first_unit[static_cast<size_t>(c)],
                       first_unit[static_cast<size_t>(c) + 1] - 1);
  }
  return out;
}

std::vector<int> parse_pipeline_layers(const std::string& text) {
  std::vector<int> counts;
  if (text.empty()) return counts;
  for (const std::string& item : split_trimmed(text)) {  // "2,2" or "2, 2"
    int value = -1;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    NDT_CHECK(ec == std::errc() && ptr == item.data() + item.size() && value >= 0,
              "parallel.pp_layers = \"{}\": \"{}\" is not a number of blocks", text, item);
    counts.push_back(value);
  }
  return counts;
}

void check_pipeline_partition(const ModelConfig& c, int chunks, const std::vector<int>& override) {
  const int L = c.n_layer;
  NDT_CHECK(chunks >= 1, "pipeline: {} chunks", chunks);
  NDT_CHECK(chunks == 1 || L >= chunks - 1,
            "parallel.pp x parallel.pp_virtual_stages = {} chunks need at least {} blocks (one in each chunk between the "
            "first and the last), but model.n_layer = {}",
            chunks, chunks - 1, L);
  if (override.empty()) return;
  NDT_CHECK(static_cast<int>(override.size()) == chunks, "parallel.pp_layers has {} counts for {} chunks (pp x v)",
            override.size(), chunks);
  int sum = 0;
  for (int b : override) sum += b;
  NDT_CHECK(sum == L, "parallel.pp_layers sums to {} blocks, but model.n_layer = {}", sum, L);
  for (int k = 1; k + 1 < chunks; ++k) {
    NDT_CHECK(override[static_cast<size_t>(k)] >= 1, "parallel.pp_layers: chunk {} has no block (only the first and "
              "the last chunk hold another unit)", k);
  }
}

PipelineStages partition_pipeline(const ModelConfig& c, int seq_len, int chunks, const std::vector<int>& override) {
  check_pipeline_partition(c, chunks, override);
  const int L = c.n_layer;
  std::vector<int> blocks = override;
  if (blocks.empty()) {
    // Minimise the costliest chunk by dynamic programming over the block boundaries.
    double block_cost = 0;
    for (const ParameterSpec& s : block_parameter_specs(c, 0)) block_cost += 6.0 * static_cast<double>(shape_numel(s.logical_shape));
    block_cost += 12.0 * c.d_model * seq_len;
    const double head_cost = 6.0 * c.vocab_size * static_cast<double>(c.d_model);
    auto cost = [&](int chunk, int first, int end) {  // blocks [first, end) in chunk
      double total = (end - first) * block_cost;
      if (chunk == chunks - 1) total += head_cost;
      return total;
    };
    const double inf = std::numeric_limits<double>::infinity();
    // best[k][b]: the smallest largest cost of chunks 0..k-1 holding blocks [0, b).
    std::vector<std::vector<double>> best(static_cast<size_t>(chunks) + 1, std::vector<double>(L + 1, inf));
    std::vector<std::vector<int>> cut(best.size(), std::vector<int>(L + 1, 0));
    best[0][0] = 0;
    for (int k = 1; k <= chunks; ++k) {
      const bool middle = k > 1 && k < chunks;
      for (int b = 0; b <= L; ++b) {
        for (int a = 0; a <= b; ++a) {
          if (middle && a == b) continue;
          if (best[k - 1][a] == inf) continue;
          const double value = std::max(best[k - 1][a], cost(k - 1, a, b));
          if (value < best[k][b]) best[k][b] = value, cut[k][b] = a;
        }
      }
    }
    blocks.assign(static_cast<size_t>(chunks), 0);
    for (int k = chunks, b = L; k >= 1; --k) {
      blocks[static_cast<size_t>(k) - 1] = b - cut[k][b];
      b = cut[k][b];
    }
  }
  PipelineStages stages;
  stages.first_unit.push_back(0);
  int unit = 1;  // after the embedding
  for (int k = 0; k < chunks; ++k) {
    unit += blocks[static_cast<size_t>(k)];
    stages.first_unit.push_back(k + 1 == chunks ? L + 2 : unit);
  }
  return stages;
}

}  // namespace ndt
