// A byte-level BPE tokenizer, loaded from the files the field ships (load_tokenizer):
// a Hugging Face tokenizer.json (model BPE over the byte-level alphabet), GPT-2's
// encoder.json + vocab.bpe, or a tiktoken rank file. Text is encoded in this order:
//   1. added tokens (special or not) are cut out of the text where they occur, leftmost
//      and longest first (unless EncodeOptions::added_tokens is false: ordinary text);
//   2. each remaining segment is split into valid UTF-8 runs and runs of invalid bytes;
//      an invalid run is one pre-token, a valid run goes through the pre-tokenizer
//      stages (the file's split regexes, in order; ByteLevel's optional prefix space);
//   3. each pre-token's bytes are merged by the BPE model (bpe.h);
//   4. the post-processor's template adds its tokens (a BOS) when asked.
// decode() concatenates the tokens' bytes: exact, even where a token ends inside a UTF-8
// character. Encoding needs per-thread state: TokenEncoder (one per thread; it caches
// pre-token -> ids).
#pragma once

#include "tokenizer/bpe.h"
#include "tokenizer/regex.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ndt::tok {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = true;
};

// One pre-tokenizer step: an optional prefix space, then an optional split (Isolated:
// matches and the text between them are all pieces).
struct PreTokenizerStage {
  std::string name;  // "Split" or "ByteLevel", for messages
  bool prefix_space = false;
  std::shared_ptr<Regex> split;
};

// What a loader produces (tokenizer_files.cpp); the Tokenizer is built from it.
struct TokenizerSpec {
  std::string kind;                 // "tokenizer.json", "gpt2 encoder.json + vocab.bpe", "tiktoken"
  std::vector<std::string> files;   // every file read, in order
  std::vector<std::string> tokens;  // id -> raw bytes ("" for added tokens and gaps)
  std::vector<std::pair<int32_t, int32_t>> merges;  // by rank; empty with rank_merges
  bool rank_merges = false;         // tiktoken: merges from the ranks themselves
  bool ignore_merges = false;
  std::vector<PreTokenizerStage> stages;
  std::vector<AddedToken> added;
  std::vector<int32_t> template_prefix, template_suffix;  // post-processor tokens around the text
  std::string eos, bos;             // token contents; "" when the files do not say
};

struct EncodeOptions {
  bool added_tokens = true;  // cut added/special tokens out of the text (Hugging Face's default)
  bool post_process = true;  // add the post-processor's template tokens (e.g. a BOS)
};

class Tokenizer {
 public:
  explicit Tokenizer(TokenizerSpec spec);
  Tokenizer(const Tokenizer&) = delete;  // the added-token index points into this object
  Tokenizer(Tokenizer&&) = default;

  const std::string& kind() const { return spec_.kind; }
  const std::vector<std::string>& files() const { return spec_.files; }
  // One more than the largest id (a model's vocabulary must be at least this).
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  // The document separator (EOS / end of text) and BOS, when the files name them.
  std::optional<int32_t> eos_id() const { return eos_; }
  std::optional<int32_t> bos_id() const { return bos_; }
  // The id of a token given by its text (an added token, or a vocabulary entry); nullopt if none.
  std::optional<int32_t> token_id(std::string_view content) const;
  // The raw bytes of a token (for an added token, its content). Throws for an id out of range.
  const std::string& token_bytes(int32_t id) const;
  // The bytes the ids stand for. Throws naming the first id out of [0, vocab_size).
  std::string decode(std::span<const int32_t> ids) const;
  // One-off encoding (builds a TokenEncoder each call: use one per thread for volume).
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;

  const std::vector<int32_t>& template_prefix() const { return spec_.template_prefix; }
  const std::vector<int32_t>& template_suffix() const { return spec_.template_suffix; }
  const std::vector<AddedToken>& added_tokens() const { return spec_.added; }
  const std::vector<PreTokenizerStage>& stages() const { return spec_.stages; }
  const BpeModel& bpe() const { return bpe_; }
  // Added tokens by first byte, longest first (for the encoder's scan).
  const std::vector<const AddedToken*>& added_starting_with(uint8_t b) const { return added_by_byte_[b]; }

 private:
  TokenizerSpec spec_;
  BpeModel bpe_;
  std::vector<std::string> tokens_;  // id -> bytes, added tokens' content included
  std::vector<std::vector<const AddedToken*>> added_by_byte_;
  std::optional<int32_t> eos_, bos_;
};

// One thread's encoder: regex matchers and a cache of pre-token -> ids.
class TokenEncoder {
 public:
  explicit TokenEncoder(const Tokenizer& tokenizer);
  // Appends the ids of `text` to `out`.
  void encode(std::string_view text, std::vector<int32_t>& out, const EncodeOptions& options = {});

 private:
  void encode_segment(std::string_view text, std::vector<int32_t>& out);
  void run_stage(size_t stage, std::string_view piece, std::vector<int32_t>& out);
  void encode_piece(std::string_view piece, std::vector<int32_t>& out);

  const Tokenizer& tok_;
  std::vector<std::unique_ptr<RegexMatcher>> matchers_;  // one per stage with a split
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>> cache_;
  std::vector<int32_t> cache_ids_;
};

// Loads a tokenizer from PATH: a tokenizer.json (or a folder holding one), an
// encoder.json with vocab.bpe beside it (or a folder holding both), or a *.tiktoken
// rank file. Anything the files use that is not built (a WordPiece or Unigram model, a
// normalizer, a pre-tokenizer or decoder type not supported) is refused by name, with
// the file, before any text is read.
Tokenizer load_tokenizer(const std::string& path);

// Byte offsets of the maximal valid UTF-8 prefix of text[from..) (used to cut invalid runs).
size_t valid_utf8_prefix(std::string_view text, size_t from);

}  // namespace ndt::tok
