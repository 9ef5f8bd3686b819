#include "model/document_starts.h"

namespace ndt {

std::vector<int32_t> document_starts(const int32_t* inputs, int B, int T, int32_t separator) {
  std::vector<int32_t> starts(static_cast<size_t>(B) * T);
  for (int b = 0; b < B; ++b) {
    int32_t start = 0;
    for (int t = 0; t < T; ++t) {
      const int64_t i = int64_t{b} * T + t;
      if (inputs[i] == separator) start = t;
      starts[static_cast<size_t>(i)] = start;
    }
  }
  return starts;
}

}  // namespace ndt
