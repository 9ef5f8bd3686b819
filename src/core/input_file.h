// What is wrong with a path the user gave as an input file (a config, a token shard,
// a model file), in words that tell the cases apart: a folder where a file was meant
// is not "does not exist".
#pragma once

#include <filesystem>
#include <string>

namespace ndt {

// "" when `path` is a regular file this process can open for reading; otherwise one of
// "does not exist", "is a directory, not a file", "is not a regular file" or
// "cannot be read: <the system's reason>".
std::string input_file_problem(const std::filesystem::path& path);

}  // namespace ndt
