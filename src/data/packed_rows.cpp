#include "data/packed_rows.h"

#include "core/error.h"

#include <algorithm>

namespace ndt {

DocumentIndex::DocumentIndex(const TokenDataset& data, int32_t separator, int T)
    : data_(data), separator_(separator), T_(T) {
  NDT_CHECK(data.has_masks(), "rows packed from whole documents need loss masks ({})", data.paths().front());
  // scan() gives offsets within a shard: the position in the concatenation is counted here.
  int64_t position = 0;
  data.scan([&](const int32_t* tokens, int64_t n, size_t, int64_t) {
    for (int64_t i = 0; i < n; ++i) {
      if (tokens[i] == separator_ || position + i == 0) starts_.push_back(position + i);
    }
    position += n;
  });
  starts_.push_back(data.size());
  for (size_t d = 0; d + 1 < starts_.size(); ++d) too_long_ += starts_[d + 1] - starts_[d] > int64_t{T} + 1;
}

void DocumentIndex::fill(int64_t d, int32_t* tokens, uint8_t* mask) const {
  NDT_CHECK(d >= 0 && d < count(), "DocumentIndex: document {} is outside [0, {})", d, count());
  const int64_t row = int64_t{T_} + 1;
  int64_t filled = 0;
  for (int64_t e = d; e < count(); ++e) {
    const int64_t length = starts_[size_t(e) + 1] - starts_[size_t(e)];
    const int64_t take = e == d ? std::min(length, row) : length;
    if (filled + take > row) break;
    data_.copy(starts_[size_t(e)], take, tokens + filled);
    data_.copy_masks(starts_[size_t(e)], take, mask + filled);
    filled += take;
  }
  std::fill(tokens + filled, tokens + row, separator_);
  std::fill(mask + filled, mask + row, uint8_t{0});
}

}  // namespace ndt
