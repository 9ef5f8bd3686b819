#include "model/freeze.h"

#include "core/error.h"

#include <cctype>
#include <string_view>

namespace ndt {

namespace {

std::vector<std::string_view> segments(std::string_view s) {
  std::vector<std::string_view> out;
  size_t begin = 0;
  for (size_t dot = s.find('.'); dot != std::string_view::npos; dot = s.find('.', begin)) {
    out.push_back(s.substr(begin, dot - begin));
    begin = dot + 1;
  }
  out.push_back(s.substr(begin));
  return out;
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Glob within one segment: '*' matches any run of characters.
bool glob(std::string_view pattern, std::string_view text) {
  if (pattern.empty()) return text.empty();
  if (pattern.front() == '*') {
    for (size_t skip = 0; skip <= text.size(); ++skip) {
      if (glob(pattern.substr(1), text.substr(skip))) return true;
    }
    return false;
  }
  return !text.empty() && pattern.front() == text.front() && glob(pattern.substr(1), text.substr(1));
}

bool segment_matches(std::string_view pattern, std::string_view segment) {
  const size_t dash = pattern.find('-');
  if (dash != std::string_view::npos && all_digits(pattern.substr(0, dash)) && all_digits(pattern.substr(dash + 1))) {
    if (!all_digits(segment)) return false;
    const long value = std::stol(std::string(segment));
    return value >= std::stol(std::string(pattern.substr(0, dash))) &&
           value <= std::stol(std::string(pattern.substr(dash + 1)));
  }
  return glob(pattern, segment);
}

std::vector<std::string> expand_alias(const std::string& pattern) {
  if (pattern == "embeddings") return {"wte", "wpe"};
  if (pattern == "head") return {"lnf", "lm_head"};
  return {pattern};
}

bool matches_one(const std::string& pattern, const std::string& name) {
  const std::vector<std::string_view> p = segments(pattern), n = segments(name);
  if (p.size() > n.size()) return false;
  for (size_t i = 0; i < p.size(); ++i) {
    if (!segment_matches(p[i], n[i])) return false;
  }
  return true;
}

}  // namespace

bool freeze_pattern_matches(const std::string& pattern, const std::string& name) {
  for (const std::string& p : expand_alias(pattern)) {
    if (matches_one(p, name)) return true;
  }
  return false;
}

void apply_freeze_patterns(std::vector<ParameterSpec>& specs, const std::vector<std::string>& patterns) {
  for (const std::string& pattern : patterns) {
    NDT_CHECK(!pattern.empty(), "train.freeze: an empty pattern (patterns name parameters, e.g. \"blocks.0-3.attn\")");
    bool matched = false;
    for (ParameterSpec& spec : specs) {
      if (!freeze_pattern_matches(pattern, spec.name)) continue;
      spec.frozen = true;
      matched = true;
    }
    if (matched) continue;
    std::string examples;
    for (size_t i = 0; i < specs.size() && i < 4; ++i) examples += (i ? ", " : "") + specs[i].name;
    fail("train.freeze: pattern \"{}\" matches no parameter of the model (names look like {}, ...; "
         "docs/fine_tuning.md)",
         pattern, examples);
  }
}

}  // namespace ndt
