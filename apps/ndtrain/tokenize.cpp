// `ndtrain tokenize --tokenizer FILE [--decode]`: standard input to token ids on one line
// (space-separated), or with --decode ids back to the bytes they stand for, as one checks a
// tokenizer with tiktoken or Hugging Face's.
#include "apps/ndtrain/commands.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>

namespace ndt {

namespace {

std::vector<int32_t> parse_ids(const std::string& text, int32_t vocab, const std::string& path) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  std::string item;
  while (in >> item) {
    if (item.back() == ',') item.pop_back();
    int64_t id = -1;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    NDT_CHECK(ec == std::errc() && ptr == item.data() + item.size() && id >= 0 && id < vocab,
              "tokenize --decode: \"{}\" is not a token id of tokenizer {} (ids lie in [0, {}))", item, path, vocab);
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

}  // namespace

int run_tokenize(const TokenizeOptions& o) {
  const tok::Tokenizer tokenizer = tok::load_tokenizer(o.tokenizer);
  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  if (o.decode) {
    const std::string bytes = tokenizer.decode(parse_ids(input, tokenizer.vocab_size(), o.tokenizer));
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    return 0;
  }
  tok::EncodeOptions options;
  options.added_tokens = !o.ordinary;
  options.post_process = !o.ordinary;
  fmt::print("{}\n", fmt::join(tokenizer.encode(input, options), " "));
  return 0;
}

}  // namespace ndt
