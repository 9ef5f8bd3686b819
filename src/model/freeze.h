// train.freeze: which parameters a fine-tuning run leaves unchanged. A pattern names
// parameters by their dot-separated names (docs/fine_tuning.md):
//   - a segment "*" matches any one segment, "A-B" (integers) any block index in A..B,
//     and "wq*" a segment that begins with "wq" (a "*" inside a segment matches any text);
//   - a pattern matches a name when it matches the name's first segments, so
//     "blocks.0-11.attn" freezes every parameter of those blocks' attention;
//   - "embeddings" means wte and wpe, "head" the final norm and the output layer.
// A pattern that matches no parameter of the model is an error naming it.
#pragma once

#include "model/parameter.h"

#include <string>
#include <vector>

namespace ndt {

// Whether `pattern` (one of train.freeze's, aliases expanded) matches parameter `name`.
bool freeze_pattern_matches(const std::string& pattern, const std::string& name);

// Marks the specs that any pattern matches frozen; throws naming the first pattern
// that matches none (and a few of the names it could have matched).
void apply_freeze_patterns(std::vector<ParameterSpec>& specs, const std::vector<std::string>& patterns);

}  // namespace ndt
