// Byte-pair encoding over raw bytes: a vocabulary (id -> byte string) and merges
// (pair of ids -> merged id, with a rank: lower merges first). encode_word turns one
// pre-token into ids the way Hugging Face's BPE model and tiktoken do: start from the
// single bytes, repeatedly merge the adjacent pair of lowest rank (the leftmost of equal
// ranks), until no pair merges. Short words scan their pairs; long ones (a run of
// thousands of symbols) keep the candidate pairs in a heap, so no input is quadratic.
// With ignore_merges (Llama 3's tokenizer.json, and tiktoken always) a word that is
// itself a token is that token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ndt::tok {

// uint64 key -> (rank, merged id), open addressing: the merge lookup is the inner loop.
class MergeTable {
 public:
  struct Entry {
    uint64_t key = 0;
    int32_t rank = -1;  // -1: empty slot
    int32_t merged = -1;
  };
  void reserve(size_t n);
  // Keeps the first (lowest-rank) entry of a pair given twice.
  void insert(int32_t left, int32_t right, int32_t rank, int32_t merged);
  const Entry* find(int32_t left, int32_t right) const {
    const uint64_t key = pack(left, right);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.rank < 0) return nullptr;
      if (e.key == key) return &e;
    }
  }
  size_t size() const { return size_; }

 private:
  static uint64_t pack(int32_t l, int32_t r) { return (uint64_t{static_cast<uint32_t>(l)} << 32) | static_cast<uint32_t>(r); }
  static size_t hash(uint64_t k) { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 20); }
  void grow();
  std::vector<Entry> slots_ = std::vector<Entry>(16);
  size_t mask_ = 15, size_ = 0;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class BpeModel {
 public:
  // tokens[id]: the raw bytes of token id ("" for an id the vocabulary does not use).
  // Throws naming `source` when a byte value has no single-byte token.
  BpeModel(std::vector<std::string> tokens, bool ignore_merges, const std::string& source);

  // The merge of `left` and `right` (ids) into `merged`, rank = order of application.
  void add_merge(int32_t left, int32_t right, int32_t merged, int32_t rank) { merges_.insert(left, right, rank, merged); }
  void reserve_merges(size_t n) { merges_.reserve(n); }
  // Every split of every token into two tokens is a merge ranked by the whole token's id
  // (tiktoken's rule: the pair whose concatenation has the lowest rank merges first).
  void add_rank_merges();

  int32_t find(std::string_view bytes) const;  // -1: not a token
  const std::string& token(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  size_t merge_count() const { return merges_.size(); }

  // Appends the ids of one pre-token (raw bytes, not empty).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  // The two merge loops encode_word picks between by length, on the single-byte ids in
  // `parts` (replaced by the result); public so tests can hold them to each other.
  void merge_by_scan(std::vector<int32_t>& parts) const;  // at most 128 parts
  void merge_by_heap(std::vector<int32_t>& parts) const;
  int32_t byte_id(uint8_t b) const { return byte_ids_[b]; }

 private:

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids_;
  int32_t byte_ids_[256];
  MergeTable merges_;
  bool ignore_merges_;
};

}  // namespace ndt::tok
