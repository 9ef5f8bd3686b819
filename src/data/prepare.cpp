#include "data/prepare.h"

#include "core/error.h"
#include "core/input_file.h"
#include "data/shard.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace fs = std::filesystem;

namespace ndt {

namespace {

void check_fraction(double val_fraction) {
  NDT_CHECK(val_fraction > 0.0 && val_fraction < 1.0,
            "val_fraction must be in (0, 1), got {}", val_fraction);
}

// Shards already in the output folder are refused, unless asked: they may be another
// corpus's, and a training run may be reading them.
void check_no_shards(const PrepareResult& result) {
  std::vector<std::string> existing;
  for (const std::string& path : {result.train_path, result.val_path}) {
    if (fs::exists(path)) existing.push_back(path);
  }
  NDT_CHECK(existing.empty(), "prepare: {} already exist{}: not overwriting them without --force",
            fmt::join(existing, " and "), existing.size() == 1 ? "s" : "");
}

// Appends the bytes of `path` to `tokens`, one token per byte.
void append_file(const std::string& path, std::vector<uint16_t>& tokens) {
  std::ifstream in(path, std::ios::binary);
  NDT_CHECK(in.good(), "cannot open input file {}: {}", path, std::strerror(errno));
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    std::streamsize got = in.gcount();
    const size_t old = tokens.size();
    tokens.resize(old + static_cast<size_t>(got));
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(buf.data());
    std::copy(bytes, bytes + got, tokens.begin() + static_cast<std::ptrdiff_t>(old));
  }
  NDT_CHECK(in.eof(), "reading input file {} failed", path);
}

}  // namespace

PrepareResult prepare_byte_shards(const std::vector<std::string>& files, const std::string& out_dir,
                                  double val_fraction, bool overwrite) {
  check_fraction(val_fraction);
  NDT_CHECK(!files.empty(), "prepare: the list of input files is empty");
  PrepareResult result;
  result.train_path = (fs::path(out_dir) / "train.bin").string();
  result.val_path = (fs::path(out_dir) / "val.bin").string();
  if (!overwrite) check_no_shards(result);
  size_t total_hint = files.size();
  for (const std::string& path : files) {
    const std::string problem = input_file_problem(path);
    NDT_CHECK(problem.empty(), "input file {} {}", path, problem);
    std::error_code ec;
    total_hint += static_cast<size_t>(fs::file_size(path, ec));
  }

  std::vector<uint16_t> tokens;
  tokens.reserve(total_hint);
  for (size_t i = 0; i < files.size(); ++i) {
    if (i > 0) tokens.push_back(static_cast<uint16_t>('\n'));
    append_file(files[i], tokens);
  }
  const int64_t total = static_cast<int64_t>(tokens.size());
  NDT_CHECK(total > 0, "prepare: the input is empty (0 bytes in {} file(s), first {})", files.size(),
            files.front());
  const int64_t n_val = std::llround(static_cast<double>(total) * val_fraction);
  const int64_t n_train = total - n_val;
  NDT_CHECK(n_train >= kMinShardTokens && n_val >= kMinShardTokens,
            "prepare: the input is too small to train on: {} bytes in {} file(s) (first {}) split with "
            "val_fraction {} into {} training and {} validation tokens; each part needs at least {} "
            "(an input and its target)",
            total, files.size(), files.front(), val_fraction, n_train, n_val, kMinShardTokens);

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  NDT_CHECK(!ec && fs::is_directory(out_dir), "cannot create output folder {}: {}", out_dir,
            ec ? ec.message() : std::string("exists and is not a folder"));

  result.train_tokens = n_train;
  result.val_tokens = n_val;
  result.files = static_cast<int>(files.size());

  std::vector<uint16_t> val(tokens.begin() + n_train, tokens.end());
  tokens.resize(static_cast<size_t>(n_train));
  write_shard(result.train_path, tokens);
  write_shard(result.val_path, val);
  return result;
}

PrepareResult prepare_byte_shards(const std::string& input, const std::string& out_dir,
                                  double val_fraction, bool overwrite) {
  check_fraction(val_fraction);
  std::error_code ec;
  fs::file_status st = fs::status(input, ec);
  NDT_CHECK(fs::exists(st), "input {} does not exist", input);
  if (!fs::is_directory(st)) {
    return prepare_byte_shards(std::vector<std::string>{input}, out_dir, val_fraction, overwrite);
  }

  std::vector<std::string> files;
  try {
    for (const fs::directory_entry& entry : fs::recursive_directory_iterator(input)) {
      // symlink_status: links are neither followed nor taken (e.g. fortune's *.u8 links
      // would duplicate their targets).
      if (fs::is_regular_file(entry.symlink_status())) files.push_back(entry.path().string());
    }
  } catch (const fs::filesystem_error& e) {
    fail("cannot list input folder {}: {}", input, e.what());
  }
  NDT_CHECK(!files.empty(), "input folder {} holds no regular files", input);
  std::sort(files.begin(), files.end());
  return prepare_byte_shards(files, out_dir, val_fraction, overwrite);
}

}  // namespace ndt
