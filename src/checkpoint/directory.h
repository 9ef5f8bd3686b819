// Where the checkpoints of a run live: <root>/step-00000010 (8-digit step), written
// first as <root>/step-00000010.tmp and renamed into place by commit_checkpoint. A
// directory counts as a checkpoint only once it has a metadata.json and no .tmp
// suffix, so a save that crashed midway is never picked up for resume.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace ndt::ckpt {

std::string checkpoint_dir_name(int64_t step);  // "step-00000010"

// Removes any leftover <root>/step-NNNNNNNN.tmp and creates it empty; returns it.
// One rank calls this before every rank writes into it.
std::filesystem::path make_tmp_checkpoint_dir(const std::filesystem::path& root, int64_t step);

// The committed checkpoint with the highest step under root; nullopt when there is none.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& root);

// Removes all committed checkpoints but the newest keep_last (>= 1), and every *.tmp
// directory: call it only when no save is in flight, e.g. right after a commit.
void prune_checkpoints(const std::filesystem::path& root, int keep_last);

// The steps of the committed checkpoints under root, in increasing order.
std::vector<int64_t> committed_steps(const std::filesystem::path& root);

// Removes the committed checkpoints with a step above `step` (-1: all) and every *.tmp
// directory; returns how many committed ones it removed. Callers decide whether the
// run may (train/checkpointing.h: only when told to, with checkpoint.overwrite).
int remove_checkpoints_after(const std::filesystem::path& root, int64_t step);

}  // namespace ndt::ckpt
