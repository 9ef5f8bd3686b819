// Attention forward and backward in double precision from float inputs: the reference the
// attention kernels' tests hold them to. Query row t of sequence b sees the keys at
// positions starts[b, t]..t (starts null: 0..t, the causal mask). Layouts as
// kernels/cpu/attention.h: q, dout [B, T, NH, HS]; k, v [B, T, NKV, HS]; lse [B, NH, T].
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace ndt::testing {

struct AttentionInputs {
  std::vector<float> q, k, v, dout;
};

struct AttentionReference {
  std::vector<double> out, lse, dq, dk, dv;
};

inline AttentionReference attention_reference(const AttentionInputs& in, int B, int T, int NH, int NKV, int HS,
                                              const int32_t* starts = nullptr) {
  AttentionReference r{std::vector<double>(in.q.size(), 0.0), std::vector<double>(size_t(B) * NH * T),
                       std::vector<double>(in.q.size(), 0.0), std::vector<double>(in.k.size(), 0.0),
                       std::vector<double>(in.k.size(), 0.0)};
  auto at = [&](int b, int t, int h, int H) { return ((size_t(b) * T + t) * H + h) * HS; };
  const double scale = 1.0 / std::sqrt(double(HS));
  std::vector<double> p(T), dp(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const int kvh = h / (NH / NKV), s = starts ? starts[size_t(b) * T + t] : 0;
        const size_t qi = at(b, t, h, NH);
        double mx = -INFINITY, sum = 0, dot = 0;
        for (int j = s; j <= t; ++j) {
          double d = 0;
          for (int e = 0; e < HS; ++e) d += double(in.q[qi + e]) * in.k[at(b, j, kvh, NKV) + e];
          mx = std::max(mx, p[j] = d * scale);
        }
        for (int j = s; j <= t; ++j) sum += std::exp(p[j] - mx);
        const double lse = mx + std::log(sum);
        r.lse[(size_t(b) * NH + h) * T + t] = lse;
        for (int j = s; j <= t; ++j) {
          const size_t kj = at(b, j, kvh, NKV);
          p[j] = std::exp(p[j] - lse), dp[j] = 0;
          for (int e = 0; e < HS; ++e) {
            r.out[qi + e] += p[j] * in.v[kj + e];
            dp[j] += double(in.dout[qi + e]) * in.v[kj + e];
          }
          dot += dp[j] * p[j];
        }
        for (int j = s; j <= t; ++j) {  // dS = P o (dP - rowsum(dP o P)) * scale
          const size_t kj = at(b, j, kvh, NKV);
          const double ds = p[j] * (dp[j] - dot) * scale;
          for (int e = 0; e < HS; ++e) {
            r.dq[qi + e] += ds * in.k[kj + e];
            r.dk[kj + e] += ds * in.q[qi + e];
            r.dv[kj + e] += p[j] * in.dout[qi + e];
          }
        }
      }
  return r;
}

}  // namespace ndt::testing
