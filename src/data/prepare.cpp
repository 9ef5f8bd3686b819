#include "data/prepare.h"

#include "core/error.h"
#include "data/shard.h"

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
                                  double val_fraction) {
  check_fraction(val_fraction);
  NDT_CHECK(!files.empty(), "prepare: the list of input files is empty");
  size_t total_hint = files.size();
  for (const std::string& path : files) {
    std::error_code ec;
    fs::file_status st = fs::status(path, ec);
    NDT_CHECK(fs::exists(st), "input file {} does not exist", path);
    NDT_CHECK(fs::is_regular_file(st), "input {} is not a regular file", path);
    total_hint += static_cast<size_t>(fs::file_size(path, ec));
  }

  std::vector<uint16_t> tokens;
  tokens.reserve(total_hint);
  for (size_t i = 0; i < files.size(); ++i) {
    if (i > 0) tokens.push_back(static_cast<uint16_t>('\n'));
    append_file(files[i], tokens);
  }
  const int64_t total = static_cast<int64_t>(tokens.size());
  NDT_CHECK(total >= 2, "prepare: the input is empty ({} bytes in {} file(s), first {}): need at "
            "least 2 bytes to split into train and val", total, files.size(), files.front());

  int64_t n_val = std::llround(static_cast<double>(total) * val_fraction);
  n_val = std::clamp<int64_t>(n_val, 1, total - 1);
  const int64_t n_train = total - n_val;

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  NDT_CHECK(!ec && fs::is_directory(out_dir), "cannot create output folder {}: {}", out_dir,
            ec ? ec.message() : std::string("exists and is not a folder"));

  PrepareResult result;
  result.train_path = (fs::path(out_dir) / "train.bin").string();
  result.val_path = (fs::path(out_dir) / "val.bin").string();
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
                                  double val_fraction) {
  check_fraction(val_fraction);
  std::error_code ec;
  fs::file_status st = fs::status(input, ec);
  NDT_CHECK(fs::exists(st), "input {} does not exist", input);
  if (!fs::is_directory(st)) return prepare_byte_shards(std::vector<std::string>{input}, out_dir,
                                                        val_fraction);

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
  return prepare_byte_shards(files, out_dir, val_fraction);
}

}  // namespace ndt
