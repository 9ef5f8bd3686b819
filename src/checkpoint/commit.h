// Committing a checkpoint once every rank's write_rank_file has returned: merge the
// per-rank index files into metadata.json, check that the chunks of each tensor tile
// it exactly, then rename the temporary directory into place. rename(2) is atomic
// on one file system, so a crash at any point leaves either the complete new
// checkpoint or only a `*.tmp` directory, which readers ignore and
// prune_checkpoints (directory.h) removes. Waiting for the other ranks is the
// caller's job (rank 0 calls this after a barrier); nothing here communicates.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>

namespace ndt::ckpt {

// Writes tmp_dir/metadata.json = {format, version, world_size, tensors: {name:
// {logical_shape, dtype, chunks}}, state: extra_state}, fsyncs it, removes the index
// files, renames tmp_dir to final_dir and fsyncs final_dir's parent. Throws
// ndt::Error naming the rank whose index file is missing, or the tensor whose
// chunks overlap, leave a gap or disagree on its logical shape or dtype.
void commit_checkpoint(const std::filesystem::path& tmp_dir, const std::filesystem::path& final_dir,
                       int world_size, const nlohmann::json& extra_state);

}  // namespace ndt::ckpt
