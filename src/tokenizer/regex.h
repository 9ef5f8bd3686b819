// A pre-tokenizer's split pattern, compiled by PCRE2 (Debian's libpcre2-8) with UTF and
// Unicode properties (\p{L}, \s as Unicode whitespace) and JIT. Patterns are used as the
// tokenizer file gives them. Matching needs per-thread state (RegexMatcher); the
// compiled pattern is shared and read-only.
#pragma once

#include <memory>
#include <string>
#include <string_view>

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;
struct pcre2_real_match_context_8;
struct pcre2_real_jit_stack_8;

namespace ndt::tok {

class Regex {
 public:
  // Throws ndt::Error naming `source`, the pattern and PCRE2's message when it does not compile.
  Regex(const std::string& pattern, const std::string& source);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  const std::string& pattern() const { return pattern_; }
  pcre2_real_code_8* code() const { return code_; }

 private:
  std::string pattern_;
  pcre2_real_code_8* code_ = nullptr;
};

// One thread's matching state for one Regex.
class RegexMatcher {
 public:
  explicit RegexMatcher(const Regex& regex);
  ~RegexMatcher();
  RegexMatcher(const RegexMatcher&) = delete;
  RegexMatcher& operator=(const RegexMatcher&) = delete;
  // The first match in text[from, end) as [begin, end) offsets into text; false when none.
  // `text` must be valid UTF-8 (not checked again here). Throws on a matching error.
  bool find(std::string_view text, size_t from, size_t& begin, size_t& end);

 private:
  const Regex& regex_;
  pcre2_real_match_data_8* data_ = nullptr;
  pcre2_real_match_context_8* context_ = nullptr;
  pcre2_real_jit_stack_8* stack_ = nullptr;
};

}  // namespace ndt::tok
