// The table of configuration keys: for each key its name ("section.key"), its meaning,
// and how to set it from text and print it back. One table drives parsing (the file
// and --set alike: train/config.h), `ndtrain config`, docs/config.md and the resolved
// config a run records, so a key cannot be parsed one way and documented another.
#pragma once

#include "train/config.h"

#include <functional>
#include <string>
#include <vector>

namespace ndt {

struct ConfigKey {
  std::string key;
  std::string doc;
  // Sets the key from its text; throws ndt::Error naming the key and the value.
  std::function<void(RunConfig&, const std::string&)> set;
  // The value as TOML writes it (strings quoted).
  std::function<std::string(const RunConfig&)> get;
};

// Every key, in the order docs/config.md lists them.
const std::vector<ConfigKey>& config_keys();
const ConfigKey* find_config_key(const std::string& key);  // null: no such key

}  // namespace ndt
