#include "tokenizer/tokenizer.h"

#include "core/error.h"

#include <algorithm>
#include <cstring>

namespace ndt::tok {

namespace {

bool continuation(std::string_view t, size_t i) { return i < t.size() && (static_cast<uint8_t>(t[i]) & 0xC0) == 0x80; }

// Length of the valid UTF-8 sequence at t[i] (no overlongs, surrogates or code points
// above U+10FFFF, as PCRE2 requires), or 0.
size_t sequence_length(std::string_view t, size_t i) {
  const auto c = static_cast<uint8_t>(t[i]);
  if (c < 0x80) return 1;
  const auto at = [&](size_t k) { return i + k < t.size() ? static_cast<uint8_t>(t[i + k]) : 0; };
  if (c >= 0xC2 && c <= 0xDF) return continuation(t, i + 1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const uint8_t lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return at(1) >= lo && at(1) <= hi && continuation(t, i + 2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const uint8_t lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return at(1) >= lo && at(1) <= hi && continuation(t, i + 2) && continuation(t, i + 3) ? 4 : 0;
  }
  return 0;
}

constexpr size_t kCacheMaxWord = 48;       // longer pre-tokens are not cached
constexpr size_t kCacheMaxEntries = 1 << 18;

}  // namespace

size_t valid_utf8_prefix(std::string_view text, size_t from) {
  size_t i = from;
  while (i < text.size()) {
    // Eight ASCII bytes at a time: most text is ASCII.
    while (i + 8 <= text.size()) {
      uint64_t w;
      std::memcpy(&w, text.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= text.size()) break;
    const size_t n = sequence_length(text, i);
    if (n == 0) break;
    i += n;
  }
  return i;
}

Tokenizer::Tokenizer(TokenizerSpec spec)
    : spec_(std::move(spec)), bpe_(spec_.tokens, spec_.ignore_merges, spec_.files.empty() ? "" : spec_.files[0]) {
  if (spec_.rank_merges) bpe_.add_rank_merges();
  bpe_.reserve_merges(spec_.merges.size());
  for (size_t r = 0; r < spec_.merges.size(); ++r) {
    const auto [l, rr] = spec_.merges[r];
    const std::string joined = bpe_.token(l) + bpe_.token(rr);
    bpe_.add_merge(l, rr, bpe_.find(joined), static_cast<int32_t>(r));
  }
  spec_.merges.clear();
  spec_.merges.shrink_to_fit();
  tokens_ = std::move(spec_.tokens);
  for (const AddedToken& a : spec_.added) {
    if (static_cast<size_t>(a.id) >= tokens_.size()) tokens_.resize(static_cast<size_t>(a.id) + 1);
    tokens_[static_cast<size_t>(a.id)] = a.content;
  }
  spec_.tokens.clear();
  added_by_byte_.resize(256);
  for (const AddedToken& a : spec_.added) {
    if (!a.content.empty()) added_by_byte_[static_cast<uint8_t>(a.content[0])].push_back(&a);
  }
  for (auto& list : added_by_byte_) {
    std::stable_sort(list.begin(), list.end(),
                     [](const AddedToken* x, const AddedToken* y) { return x->content.size() > y->content.size(); });
  }
  if (!spec_.eos.empty()) eos_ = token_id(spec_.eos);
  if (!spec_.bos.empty()) bos_ = token_id(spec_.bos);
}

std::optional<int32_t> Tokenizer::token_id(std::string_view content) const {
  for (const AddedToken& a : spec_.added) {
    if (a.content == content) return a.id;
  }
  const int32_t id = bpe_.find(content);
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  NDT_CHECK(id >= 0 && id < vocab_size(), "token id {} is outside the tokenizer's vocabulary [0, {}) ({})", id,
            vocab_size(), spec_.files.empty() ? kind() : spec_.files[0]);
  return tokens_[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<int32_t> ids;
  TokenEncoder(*this).encode(text, ids, options);
  return ids;
}

TokenEncoder::TokenEncoder(const Tokenizer& tokenizer) : tok_(tokenizer) {
  for (const PreTokenizerStage& s : tok_.stages()) {
    matchers_.push_back(s.split ? std::make_unique<RegexMatcher>(*s.split) : nullptr);
  }
}

void TokenEncoder::encode(std::string_view text, std::vector<int32_t>& out, const EncodeOptions& options) {
  if (options.post_process) out.insert(out.end(), tok_.template_prefix().begin(), tok_.template_prefix().end());
  size_t start = 0;
  if (options.added_tokens && !tok_.added_tokens().empty()) {
    for (size_t i = 0; i < text.size(); ++i) {
      const auto& candidates = tok_.added_starting_with(static_cast<uint8_t>(text[i]));
      for (const AddedToken* a : candidates) {
        if (text.compare(i, a->content.size(), a->content) != 0) continue;
        encode_segment(text.substr(start, i - start), out);
        out.push_back(a->id);
        i += a->content.size() - 1;
        start = i + 1;
        break;
      }
    }
  }
  encode_segment(text.substr(start), out);
  if (options.post_process) out.insert(out.end(), tok_.template_suffix().begin(), tok_.template_suffix().end());
}

void TokenEncoder::encode_segment(std::string_view text, std::vector<int32_t>& out) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t valid_end = valid_utf8_prefix(text, i);
    if (valid_end > i) run_stage(0, text.substr(i, valid_end - i), out);
    size_t bad_end = valid_end;  // a run of bytes none of which starts a valid character
    while (bad_end < text.size() && sequence_length(text, bad_end) == 0) ++bad_end;
    if (bad_end > valid_end) encode_piece(text.substr(valid_end, bad_end - valid_end), out);
    i = bad_end;
  }
}

void TokenEncoder::run_stage(size_t stage, std::string_view piece, std::vector<int32_t>& out) {
  if (piece.empty()) return;
  if (stage == matchers_.size()) {
    encode_piece(piece, out);
    return;
  }
  const PreTokenizerStage& s = tok_.stages()[stage];
  std::string prefixed;
  if (s.prefix_space && piece.front() != ' ') {
    prefixed = " ";
    prefixed += piece;
    piece = prefixed;
  }
  RegexMatcher* m = matchers_[stage].get();
  if (m == nullptr) {
    run_stage(stage + 1, piece, out);
    return;
  }
  size_t pos = 0, search = 0, begin = 0, end = 0;
  while (search < piece.size() && m->find(piece, search, begin, end)) {
    if (end == begin) {  // an empty match splits nothing: search again one character on
      if (begin >= piece.size()) break;
      search = begin + std::max<size_t>(1, sequence_length(piece, begin));
      continue;
    }
    run_stage(stage + 1, piece.substr(pos, begin - pos), out);
    run_stage(stage + 1, piece.substr(begin, end - begin), out);
    pos = search = end;
  }
  run_stage(stage + 1, piece.substr(pos), out);
}

void TokenEncoder::encode_piece(std::string_view piece, std::vector<int32_t>& out) {
  if (piece.size() > kCacheMaxWord) {
    tok_.bpe().encode_word(piece, out);
    return;
  }
  if (const auto it = cache_.find(piece); it != cache_.end()) {
    out.insert(out.end(), cache_ids_.begin() + it->second.first,
               cache_ids_.begin() + it->second.first + it->second.second);
    return;
  }
  if (cache_.size() >= kCacheMaxEntries) cache_.clear(), cache_ids_.clear();
  const size_t before = out.size();
  tok_.bpe().encode_word(piece, out);
  const auto offset = static_cast<uint32_t>(cache_ids_.size());
  cache_ids_.insert(cache_ids_.end(), out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
  cache_.emplace(std::string(piece), std::pair{offset, static_cast<uint32_t>(out.size() - before)});
}

}  // namespace ndt::tok
