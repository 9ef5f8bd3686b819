#include "data/dataset_spec.h"

#include "core/error.h"
#include "core/input_file.h"

#include <glob.h>
#include <toml++/toml.h>

#include <cmath>

namespace ndt {

namespace {

toml::array parse_list(const std::string& key, const std::string& value) {
  try {
    toml::table t = toml::parse("v = " + value);
    const toml::array* a = t["v"].as_array();
    NDT_CHECK(a != nullptr, "{} = {} is not a list", key, value);
    return *a;
  } catch (const toml::parse_error& e) {
    fail("{} = {} is not a TOML list: {}", key, value, e.description());
  }
}

bool has_wildcard(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

void add_pattern(const std::string& key, const std::string& value, const std::string& pattern,
                 std::vector<std::string>& out) {
  if (!has_wildcard(pattern)) {
    const std::string problem = input_file_problem(pattern);
    NDT_CHECK(problem.empty(), "{} = \"{}\" {}", key, pattern, problem);
    out.push_back(pattern);
    return;
  }
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> found(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  ::globfree(&g);
  NDT_CHECK(rc == 0 && !found.empty(), "{} = \"{}\": the pattern \"{}\" matches no file", key, value, pattern);
  for (const std::string& f : found) {  // glob sorts its matches
    const std::string problem = input_file_problem(f);
    NDT_CHECK(problem.empty(), "{} = \"{}\": {} {}", key, value, f, problem);
    out.push_back(f);
  }
}

}  // namespace

std::vector<std::string> resolve_shards(const std::string& key, const std::string& value) {
  std::vector<std::string> out;
  if (value.empty() || value.front() != '[') {
    add_pattern(key, value, value, out);
    return out;
  }
  const toml::array list = parse_list(key, value);
  NDT_CHECK(!list.empty(), "{} = {} is an empty list: give at least one shard", key, value);
  for (const toml::node& n : list) {
    const std::optional<std::string> s = n.value<std::string>();
    NDT_CHECK(s.has_value(), "{} = {}: every item must be a string (a shard path or glob)", key, value);
    add_pattern(key, value, *s, out);
  }
  return out;
}

std::vector<MixSpec> parse_mix(const std::string& value) {
  const toml::array list = parse_list("data.mix", value);
  NDT_CHECK(!list.empty(), "data.mix = {} is an empty list (leave data.mix unset to train on data.train)", value);
  std::vector<MixSpec> out;
  for (const toml::node& n : list) {
    const toml::table* t = n.as_table();
    NDT_CHECK(t != nullptr, "data.mix = {}: every item must be a table {{ path = \"...\", weight = 0.5 }}", value);
    for (const auto& [k, v] : *t) {
      NDT_CHECK(k == "path" || k == "weight", "data.mix: unknown key \"{}\" in an item (path and weight are known)",
                k.str());
    }
    MixSpec m;
    if (const toml::array* paths = (*t)["path"].as_array()) {
      std::ostringstream text;
      text << *paths;
      m.path = text.str();
    } else {
      const std::optional<std::string> p = (*t)["path"].value<std::string>();
      NDT_CHECK(p.has_value(), "data.mix = {}: an item has no path (a string, a glob or a list)", value);
      m.path = *p;
    }
    const std::optional<double> w = (*t)["weight"].value<double>();
    NDT_CHECK(w.has_value() && std::isfinite(*w) && *w > 0, "data.mix: the weight of \"{}\" must be a positive number",
              m.path);
    m.weight = *w;
    out.push_back(m);
  }
  return out;
}

}  // namespace ndt
