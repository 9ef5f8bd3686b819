#include "tokenizer/regex.h"

#include "core/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace ndt::tok {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& source) : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                        &error, &offset, nullptr);
  NDT_CHECK(code_ != nullptr, "tokenizer {}: the split pattern \"{}\" does not compile at offset {}: {}", source,
            pattern, offset, pcre2_message(error));
  // JIT where the platform has it; the interpreter otherwise gives the same matches.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() { pcre2_code_free(code_); }

RegexMatcher::RegexMatcher(const Regex& regex) : regex_(regex) {
  data_ = pcre2_match_data_create_from_pattern(regex.code(), nullptr);
  context_ = pcre2_match_context_create(nullptr);
  // Long runs (whitespace, digits) backtrack deeply under lookaheads: a 1 MiB JIT stack.
  stack_ = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
  NDT_CHECK(data_ && context_ && stack_, "tokenizer: out of memory creating the matcher for \"{}\"", regex.pattern());
  pcre2_jit_stack_assign(context_, nullptr, stack_);
}

RegexMatcher::~RegexMatcher() {
  pcre2_jit_stack_free(stack_);
  pcre2_match_context_free(context_);
  pcre2_match_data_free(data_);
}

bool RegexMatcher::find(std::string_view text, size_t from, size_t& begin, size_t& end) {
  const int rc = pcre2_match(regex_.code(), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), from,
                             PCRE2_NO_UTF_CHECK, data_, context_);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  NDT_CHECK(rc > 0, "tokenizer: matching the split pattern \"{}\" failed: {}", regex_.pattern(), pcre2_message(rc));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data_);
  begin = ovector[0];
  end = ovector[1];
  return true;
}

}  // namespace ndt::tok
