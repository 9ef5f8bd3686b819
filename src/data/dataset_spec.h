// What a data setting names: data.train / data.val are a shard path, a glob
// ("data/fineweb/train_*.bin", matches sorted) or a TOML list of them
// (["a.bin", "more/*.bin"]); data.mix is a TOML list of { path = ..., weight = ... }
// whose paths are any of those. The config keeps the setting's text; these turn it into
// files, each checked to be a readable regular file.
#pragma once

#include <string>
#include <vector>

namespace ndt {

// The shard files a setting names, in order (each glob's matches sorted). Throws
// ndt::Error naming `key` and the value: a glob matching nothing, a file that is missing,
// a folder or unreadable, a list that is not TOML strings, an empty list.
std::vector<std::string> resolve_shards(const std::string& key, const std::string& value);

struct MixSpec {
  std::string path;  // the entry's path setting (a path, glob or list)
  double weight = 1;
};
// Parses data.mix's text. Throws naming data.mix for anything but a non-empty list of
// tables with a string `path` and a positive number `weight`.
std::vector<MixSpec> parse_mix(const std::string& value);

}  // namespace ndt
