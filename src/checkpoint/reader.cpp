#include "checkpoint/reader.h"

#include "checkpoint/checksum.h"
#include "checkpoint/file_io.h"
#include "core/error.h"

#include <fstream>

namespace ndt::ckpt {

CheckpointReader::CheckpointReader(const std::filesystem::path& dir) : dir_(dir) {
  const std::filesystem::path path = dir / kMetadataFile;
  NDT_CHECK(std::filesystem::exists(path),
            "checkpoint {} has no {} (not a checkpoint, or a save that was never committed)",
            dir.string(), kMetadataFile);
  std::ifstream in(path);
  try {
    const nlohmann::json metadata = nlohmann::json::parse(in);
    NDT_CHECK(metadata.at("format") == kFormat && metadata.at("version") == kFormatVersion,
              "{} is not an {} version {} metadata file (format {}, version {}{})", path.string(),
              kFormat, kFormatVersion, metadata.at("format").dump(), metadata.at("version").dump(),
              metadata.at("version") == 1 ? ", written by an earlier ndtrain before metadata checksums" : "");
    NDT_CHECK(metadata.contains("metadata_crc32c"), "{} has no metadata_crc32c: it was not written by ndtrain's commit",
              path.string());
    const std::string stored = metadata.at("metadata_crc32c").get<std::string>();
    const std::string computed = metadata_checksum(metadata);
    NDT_CHECK(stored == computed,
              "{} was changed or damaged after it was written: its checksum is {}, its contents give {} (nothing "
              "was loaded)",
              path.string(), stored, computed);
    state_ = metadata.at("state");
    for (const auto& [name, t] : metadata.at("tensors").items()) {
      NDT_CHECK(t.at("dtype") == kDType, "tensor {} in {} has dtype {}; only {} is supported", name,
                path.string(), t.at("dtype").dump(), kDType);
      tensors_[name] = SavedTensor{t.at("logical_shape").get<Shape>(),
                                   t.at("chunks").get<std::vector<Chunk>>()};
    }
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint metadata {} is malformed: {}", path.string(), e.what());
  }
}

const CheckpointReader::SavedTensor& CheckpointReader::tensor(const std::string& name) const {
  const auto it = tensors_.find(name);
  NDT_CHECK(it != tensors_.end(), "unknown tensor {}: checkpoint {} does not have it", name,
            dir_.string());
  return it->second;
}

std::vector<std::string> CheckpointReader::tensor_names() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors_) names.push_back(name);
  return names;
}

const Shape& CheckpointReader::logical_shape(const std::string& name) const {
  return tensor(name).logical_shape;
}

void CheckpointReader::read_block(const std::string& name, const Shape& logical_shape,
                                  const Shape& offset, const Shape& shape, float* out) {
  const SavedTensor& t = tensor(name);
  NDT_CHECK(logical_shape == t.logical_shape,
            "tensor {}: requested with logical shape {} but checkpoint {} has logical shape {}",
            name, shape_str(logical_shape), dir_.string(), shape_str(t.logical_shape));
  const Box request{offset, shape};
  NDT_CHECK(contains(Box{Shape(logical_shape.size(), 0), logical_shape}, request),
            "tensor {}: requested block at {} lies outside its logical shape {}", name,
            box_str(request), shape_str(logical_shape));

  std::vector<std::pair<const Chunk*, Box>> parts;
  int64_t covered = 0;
  for (const Chunk& chunk : t.chunks) {
    if (std::optional<Box> part = intersect(Box{chunk.offset, chunk.shape}, request)) {
      covered += box_numel(*part);
      parts.emplace_back(&chunk, std::move(*part));
    }
  }
  NDT_CHECK(covered == box_numel(request),
            "tensor {}: the chunks in checkpoint {} cover {} of the {} elements of the requested "
            "block at {}",
            name, dir_.string(), covered, box_numel(request), box_str(request));
  for (const auto& [chunk, part] : parts) read_part(name, *chunk, part, request, out);
}

void CheckpointReader::read_part(const std::string& name, const Chunk& chunk, const Box& part,
                                 const Box& request, float* out) {
  const std::filesystem::path path = dir_ / chunk.file;
  const Box chunk_box{chunk.offset, chunk.shape};
  const int64_t chunk_bytes = box_numel(chunk_box) * static_cast<int64_t>(sizeof(float));
  NDT_CHECK(chunk.byte_length == chunk_bytes,
            "tensor {}: chunk at offset {} of file {} has byte_length {} but its shape {} needs {}",
            name, shape_str(chunk.offset), path.string(), chunk.byte_length,
            shape_str(chunk.shape), chunk_bytes);
  NDT_CHECK(std::filesystem::exists(path), "tensor {}: data file {} is missing", name,
            path.string());
  PosixFile file = PosixFile::open_read(path);
  const int64_t file_bytes = file.size();
  NDT_CHECK(file_bytes >= chunk.byte_offset + chunk.byte_length,
            "tensor {}: data file {} is truncated: it has {} bytes but the chunk at offset {} "
            "needs bytes [{}, {})",
            name, path.string(), file_bytes, shape_str(chunk.offset), chunk.byte_offset,
            chunk.byte_offset + chunk.byte_length);

  // A verified chunk is read only from the part's first to its last element.
  const auto key = std::make_pair(chunk.file, chunk.byte_offset);
  const bool verified = verified_.count(key) > 0;
  int64_t first = 0;
  int64_t end = box_numel(chunk_box);
  if (verified) {
    Shape last = part.offset;
    for (size_t d = 0; d < last.size(); ++d) last[d] += part.shape[d] - 1;
    first = linear_index(chunk_box, part.offset);
    end = linear_index(chunk_box, last) + 1;
  }
  std::vector<float> buffer(static_cast<size_t>(end - first));
  const size_t bytes = buffer.size() * sizeof(float);
  file.read_at(buffer.data(), bytes,
               chunk.byte_offset + first * static_cast<int64_t>(sizeof(float)));
  bytes_read_ += static_cast<int64_t>(bytes);
  if (!verified) {
    const uint32_t computed = crc32c(buffer.data(), bytes);
    NDT_CHECK(computed == chunk.crc32c,
              "checksum mismatch in tensor {}, chunk at offset {} of file {}: stored 0x{:08x}, "
              "computed 0x{:08x}",
              name, shape_str(chunk.offset), path.string(), chunk.crc32c, computed);
    verified_.insert(key);
  }
  copy_region(part, buffer.data(), chunk_box, first, out, request);
}

}  // namespace ndt::ckpt
