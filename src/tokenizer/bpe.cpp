#include "tokenizer/bpe.h"

#include "core/error.h"

#include <queue>

namespace ndt::tok {

void MergeTable::reserve(size_t n) {
  while (slots_.size() < 2 * n) grow();
}

void MergeTable::grow() {
  std::vector<Entry> old = std::move(slots_);
  slots_.assign(old.size() * 2, Entry{});
  mask_ = slots_.size() - 1;
  size_ = 0;
  for (const Entry& e : old) {
    if (e.rank >= 0) insert(static_cast<int32_t>(e.key >> 32), static_cast<int32_t>(e.key & 0xFFFFFFFFu), e.rank, e.merged);
  }
}

void MergeTable::insert(int32_t left, int32_t right, int32_t rank, int32_t merged) {
  if (2 * (size_ + 1) > slots_.size()) grow();
  const uint64_t key = pack(left, right);
  for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
    Entry& e = slots_[i];
    if (e.rank < 0) {
      e = Entry{key, rank, merged};
      ++size_;
      return;
    }
    if (e.key == key) return;  // the earlier (lower) rank stays
  }
}

BpeModel::BpeModel(std::vector<std::string> tokens, bool ignore_merges, const std::string& source)
    : tokens_(std::move(tokens)), ignore_merges_(ignore_merges) {
  ids_.reserve(tokens_.size());
  for (size_t id = 0; id < tokens_.size(); ++id) {
    if (!tokens_[id].empty()) ids_.emplace(tokens_[id], static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    NDT_CHECK(byte_ids_[b] >= 0,
              "tokenizer {}: the vocabulary has no token for byte 0x{:02X}, which byte-level BPE needs for every "
              "byte value", source, b);
  }
}

int32_t BpeModel::find(std::string_view bytes) const {
  const auto it = ids_.find(bytes);
  return it == ids_.end() ? -1 : it->second;
}

void BpeModel::add_rank_merges() {
  for (size_t id = 0; id < tokens_.size(); ++id) {
    const std::string& t = tokens_[id];
    for (size_t cut = 1; cut < t.size(); ++cut) {
      const int32_t l = find(std::string_view(t).substr(0, cut)), r = find(std::string_view(t).substr(cut));
      if (l >= 0 && r >= 0) merges_.insert(l, r, static_cast<int32_t>(id), static_cast<int32_t>(id));
    }
  }
}

void BpeModel::merge_by_scan(std::vector<int32_t>& parts) const {
  // ranks[i]: the rank of merging parts[i] and parts[i + 1] (INT32_MAX: none).
  constexpr int32_t kNone = INT32_MAX;
  int32_t ranks[128];
  int32_t merged[128];
  const auto pair_at = [&](size_t i) {
    const MergeTable::Entry* e = merges_.find(parts[i], parts[i + 1]);
    ranks[i] = e ? e->rank : kNone;
    merged[i] = e ? e->merged : -1;
  };
  for (size_t i = 0; i + 1 < parts.size(); ++i) pair_at(i);
  while (parts.size() > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < parts.size(); ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == kNone) break;
    parts[best] = merged[best];
    for (size_t i = best + 1; i + 1 < parts.size(); ++i) {
      parts[i] = parts[i + 1], ranks[i] = ranks[i + 1], merged[i] = merged[i + 1];
    }
    parts.pop_back();
    if (best + 1 < parts.size()) pair_at(best);
    else ranks[best] = kNone;
    if (best > 0) pair_at(best - 1);
  }
}

void BpeModel::merge_by_heap(std::vector<int32_t>& parts) const {
  const int n = static_cast<int>(parts.size());
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
  struct Candidate {
    int32_t rank;
    int pos, left, right;  // the ids it was computed for: stale when they changed
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto push = [&](int i) {
    if (i < 0 || next[i] < 0) return;
    if (const MergeTable::Entry* e = merges_.find(parts[i], parts[next[i]])) {
      heap.push({e->rank, i, parts[i], parts[next[i]]});
    }
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int j = next[c.pos];
    if (parts[c.pos] != c.left || j < 0 || parts[j] != c.right) continue;  // stale
    parts[c.pos] = merges_.find(c.left, c.right)->merged;
    parts[j] = -1;
    next[c.pos] = next[j];
    if (next[j] >= 0) prev[next[j]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  std::erase(parts, -1);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    out.push_back(byte_ids_[static_cast<uint8_t>(word[0])]);
    return;
  }
  if (ignore_merges_) {
    if (const int32_t id = find(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  thread_local std::vector<int32_t> parts;
  parts.clear();
  for (char c : word) parts.push_back(byte_ids_[static_cast<uint8_t>(c)]);
  if (parts.size() <= 128) merge_by_scan(parts);
  else merge_by_heap(parts);
  out.insert(out.end(), parts.begin(), parts.end());
}

}  // namespace ndt::tok
