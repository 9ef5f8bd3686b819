#include "checkpoint/directory.h"

#include "checkpoint/checkpoint.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string_view>
#include <utility>
#include <vector>

namespace ndt::ckpt {

namespace {

constexpr std::string_view kPrefix = "step-";
constexpr std::string_view kTmpSuffix = ".tmp";

// The step of a "step-NNNNNNNN" name (8 to 18 digits, nothing after); nullopt otherwise.
std::optional<int64_t> parse_step(const std::string& name) {
  if (!name.starts_with(kPrefix)) return std::nullopt;
  const std::string digits = name.substr(kPrefix.size());
  if (digits.size() < 8 || digits.size() > 18) return std::nullopt;
  if (!std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return std::nullopt;
  }
  return std::stoll(digits);
}

// Committed checkpoints under root, oldest first.
using StepDirs = std::vector<std::pair<int64_t, std::filesystem::path>>;

StepDirs committed(const std::filesystem::path& root) {
  StepDirs found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const std::optional<int64_t> step = parse_step(entry.path().filename().string());
    if (step && std::filesystem::exists(entry.path() / kMetadataFile)) {
      found.emplace_back(*step, entry.path());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

void remove_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  NDT_CHECK(!ec, "cannot remove checkpoint directory {}: {}", dir.string(), ec.message());
}

void remove_tmp_dirs(const std::filesystem::path& root) {
  std::vector<std::filesystem::path> stale;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(kPrefix) && name.ends_with(kTmpSuffix)) stale.push_back(entry.path());
  }
  for (const std::filesystem::path& dir : stale) remove_dir(dir);
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) {
  NDT_CHECK(step >= 0, "checkpoint step {} is negative", step);
  return fmt::format("{}{:08d}", kPrefix, step);
}

std::filesystem::path make_tmp_checkpoint_dir(const std::filesystem::path& root, int64_t step) {
  const std::filesystem::path dir = root / (checkpoint_dir_name(step) + std::string(kTmpSuffix));
  remove_dir(dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  NDT_CHECK(!ec, "cannot create checkpoint directory {}: {}", dir.string(), ec.message());
  return dir;
}

std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& root) {
  auto found = committed(root);
  if (found.empty()) return std::nullopt;
  return found.back().second;
}

std::vector<int64_t> committed_steps(const std::filesystem::path& root) {
  std::vector<int64_t> steps;
  for (const auto& [step, dir] : committed(root)) steps.push_back(step);
  return steps;
}

int remove_checkpoints_after(const std::filesystem::path& root, int64_t step) {
  int removed = 0;
  for (const auto& [found_step, dir] : committed(root)) {
    if (found_step > step) remove_dir(dir), ++removed;
  }
  remove_tmp_dirs(root);
  return removed;
}

void prune_checkpoints(const std::filesystem::path& root, int keep_last) {
  NDT_CHECK(keep_last >= 1, "prune_checkpoints: keep_last must be at least 1, got {}", keep_last);
  const auto found = committed(root);
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < found.size(); ++i) {
    remove_dir(found[i].second);
  }
  remove_tmp_dirs(root);
}

}  // namespace ndt::ckpt
