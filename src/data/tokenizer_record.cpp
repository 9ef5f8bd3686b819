#include "data/tokenizer_record.h"

#include "core/error.h"
#include "core/output_file.h"
#include "tokenizer/sha256.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace ndt {

void write_tokenizer_record(const std::string& out_dir, const tok::Tokenizer& tokenizer, int32_t separator,
                            const std::string& dtype) {
  const fs::path dir = fs::path(out_dir) / "tokenizer";
  std::error_code ec;
  fs::create_directories(dir, ec);
  NDT_CHECK(!ec, "cannot create {}: {}", dir.string(), ec.message());
  nlohmann::json files = nlohmann::json::array();
  for (const std::string& f : tokenizer.files()) {
    const fs::path to = dir / fs::path(f).filename();
    fs::copy_file(f, to, fs::copy_options::overwrite_existing, ec);
    NDT_CHECK(!ec, "cannot copy tokenizer file {} to {}: {}", f, to.string(), ec.message());
    files.push_back({{"name", fs::path(f).filename().string()}, {"source", fs::absolute(f).string()},
                     {"sha256", tok::sha256_file_hex(f)}});
  }
  const nlohmann::json record = {{"kind", tokenizer.kind()},
                                 {"vocab_size", tokenizer.vocab_size()},
                                 {"separator", {{"id", separator}, {"text", tokenizer.token_bytes(separator)}}},
                                 {"dtype", dtype},
                                 {"files", files}};
  AtomicFile out((fs::path(out_dir) / kTokenizerRecordFile).string());
  const std::string text = record.dump(2) + "\n";
  out.write(text.data(), text.size());
  out.commit();
}

std::optional<std::string> recorded_tokenizer(const std::string& shard) {
  const fs::path record_path = fs::path(shard).parent_path() / kTokenizerRecordFile;
  if (!fs::is_regular_file(record_path)) return std::nullopt;
  nlohmann::json record;
  try {
    std::ifstream in(record_path);
    record = nlohmann::json::parse(in);
    const nlohmann::json& first = record.at("files").at(0);
    const fs::path file = record_path.parent_path() / "tokenizer" / first.at("name").get<std::string>();
    for (const nlohmann::json& f : record.at("files")) {
      const fs::path copy = record_path.parent_path() / "tokenizer" / f.at("name").get<std::string>();
      const std::string sha = tok::sha256_file_hex(copy.string());
      NDT_CHECK(sha == f.at("sha256").get<std::string>(),
                "{} records tokenizer file {} with SHA-256 {}, but the file's is {}: it changed after the shards were "
                "made", record_path.string(), copy.string(), f.at("sha256").get<std::string>(), sha);
    }
    return file.string();
  } catch (const nlohmann::json::exception& e) {
    fail("tokenizer record {} is malformed: {}", record_path.string(), e.what());
  }
}

std::optional<int32_t> recorded_separator(const std::string& shard) {
  const fs::path record_path = fs::path(shard).parent_path() / kTokenizerRecordFile;
  if (!fs::is_regular_file(record_path)) return std::nullopt;
  try {
    std::ifstream in(record_path);
    return nlohmann::json::parse(in).at("separator").at("id").get<int32_t>();
  } catch (const nlohmann::json::exception& e) {
    fail("tokenizer record {} is malformed: {}", record_path.string(), e.what());
  }
}

}  // namespace ndt
