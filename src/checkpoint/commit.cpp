#include "checkpoint/commit.h"

#include "checkpoint/box.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/file_io.h"
#include "core/error.h"

#include <fstream>
#include <map>
#include <vector>

namespace ndt::ckpt {

namespace {

struct TensorEntry {
  Shape logical_shape;
  std::string dtype;
  std::string first_file;  // the file that first named the tensor, for messages
  std::vector<Chunk> chunks;
};

struct IndexEntry {
  std::string name;
  Shape logical_shape;
  std::string dtype;
  Chunk chunk;
};

std::vector<IndexEntry> read_index(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<IndexEntry> entries;
  try {
    for (const nlohmann::json& j : nlohmann::json::parse(in)) {
      entries.push_back({j.at("name").get<std::string>(), j.at("logical_shape").get<Shape>(),
                         j.at("dtype").get<std::string>(), j.get<Chunk>()});
    }
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint index {} is malformed: {}", path.string(), e.what());
  }
  return entries;
}

// Every chunk inside the tensor, no two overlapping, and together as many elements
// as the tensor: then they cover it exactly.
void check_exact_cover(const std::string& name, const TensorEntry& t) {
  const Box whole{Shape(t.logical_shape.size(), 0), t.logical_shape};
  int64_t covered = 0;
  for (size_t i = 0; i < t.chunks.size(); ++i) {
    const Box a{t.chunks[i].offset, t.chunks[i].shape};
    NDT_CHECK(contains(whole, a), "tensor {}: chunk at {} in {} lies outside its logical shape {}",
              name, box_str(a), t.chunks[i].file, shape_str(t.logical_shape));
    for (size_t j = 0; j < i; ++j) {
      const Box b{t.chunks[j].offset, t.chunks[j].shape};
      NDT_CHECK(!intersect(a, b), "tensor {}: chunk at {} in {} overlaps chunk at {} in {}", name,
                box_str(a), t.chunks[i].file, box_str(b), t.chunks[j].file);
    }
    covered += box_numel(a);
  }
  NDT_CHECK(covered == shape_numel(t.logical_shape),
            "tensor {}: the saved chunks cover {} of the {} elements of logical shape {}", name,
            covered, shape_numel(t.logical_shape), shape_str(t.logical_shape));
}

std::map<std::string, TensorEntry> merge_indexes(const std::filesystem::path& tmp_dir,
                                                 int world_size) {
  std::map<std::string, TensorEntry> tensors;
  for (int rank = 0; rank < world_size; ++rank) {
    const std::filesystem::path path = tmp_dir / index_file_name(rank);
    NDT_CHECK(std::filesystem::exists(path),
              "cannot commit checkpoint {}: {} is missing (rank {} of {} did not finish writing)",
              tmp_dir.string(), path.filename().string(), rank, world_size);
    for (const IndexEntry& e : read_index(path)) {
      TensorEntry& t =
          tensors.try_emplace(e.name, TensorEntry{e.logical_shape, e.dtype, e.chunk.file, {}})
              .first->second;
      NDT_CHECK(t.logical_shape == e.logical_shape && t.dtype == e.dtype,
                "tensor {}: {} saves it as {} {} but {} as {} {}", e.name, t.first_file,
                shape_str(t.logical_shape), t.dtype, e.chunk.file, shape_str(e.logical_shape),
                e.dtype);
      if (shape_numel(e.chunk.shape) > 0) t.chunks.push_back(e.chunk);
    }
  }
  return tensors;
}

// Index files are named by rank; one beyond world_size means a mismatched world size.
void check_no_extra_indexes(const std::filesystem::path& tmp_dir, int world_size) {
  for (const auto& entry : std::filesystem::directory_iterator(tmp_dir)) {
    const std::string file = entry.path().filename().string();
    if (!file.starts_with("index-rank-")) continue;
    bool known = false;
    for (int rank = 0; rank < world_size && !known; ++rank) known = file == index_file_name(rank);
    NDT_CHECK(known, "cannot commit checkpoint {}: {} does not belong to a rank of world size {}",
              tmp_dir.string(), file, world_size);
  }
}

}  // namespace

void commit_checkpoint(const std::filesystem::path& tmp_dir, const std::filesystem::path& final_dir,
                       int world_size, const nlohmann::json& extra_state) {
  NDT_CHECK(world_size >= 1, "cannot commit checkpoint {}: world size {} is not positive",
            tmp_dir.string(), world_size);
  NDT_CHECK(!std::filesystem::exists(final_dir),
            "cannot commit checkpoint {}: {} already exists", tmp_dir.string(), final_dir.string());
  const std::map<std::string, TensorEntry> tensors = merge_indexes(tmp_dir, world_size);
  check_no_extra_indexes(tmp_dir, world_size);

  nlohmann::json tensors_json = nlohmann::json::object();
  for (const auto& [name, t] : tensors) {
    check_exact_cover(name, t);
    tensors_json[name] = {
        {"logical_shape", t.logical_shape}, {"dtype", t.dtype}, {"chunks", t.chunks}};
  }
  nlohmann::json metadata = {{"format", kFormat},         {"version", kFormatVersion},
                             {"world_size", world_size},  {"tensors", tensors_json},
                             {"state", extra_state}};
  metadata["metadata_crc32c"] = metadata_checksum(metadata);
  write_file_durably(tmp_dir / kMetadataFile, metadata.dump(1));
  std::error_code ec;
  for (int rank = 0; rank < world_size && !ec; ++rank) {
    std::filesystem::remove(tmp_dir / index_file_name(rank), ec);
  }
  NDT_CHECK(!ec, "cannot remove the index files of checkpoint {}: {}", tmp_dir.string(),
            ec.message());
  sync_directory(tmp_dir);
  std::filesystem::rename(tmp_dir, final_dir, ec);
  NDT_CHECK(!ec, "cannot rename checkpoint {} to {}: {}", tmp_dir.string(), final_dir.string(),
            ec.message());
  sync_directory(final_dir.parent_path().empty() ? "." : final_dir.parent_path());
}

}  // namespace ndt::ckpt
