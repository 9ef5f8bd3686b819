// The CUDA row kernels against their CPU twins: LayerNorm and RMSNorm forward and
// backward, causal attention with log-sum-exp forward and backward (grouped K/V heads,
// with and without document starts), and the refusals the CPU twin makes.
#include "../common/errors.h"
#include "../common/gradcheck.h"
#include "cuda_test.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/norm.h"
#include "kernels/cuda/cuda_kernels.h"

#include <vector>

namespace ndt {
namespace {

using testing::CudaTest;
using testing::expect_close;
using testing::on_device;
using testing::on_host;
using testing::random_vector;

class CudaRows : public CudaTest {};

TEST_F(CudaRows, LayerNormMatchesCpu) {
  const int N = 13, C = 70;
  const std::vector<float> x = random_vector(N * C, 1, 2.0f), w = random_vector(C, 2), b = random_vector(C, 3),
                           dout = random_vector(N * C, 4);
  std::vector<float> out(N * C), mean(N), rstd(N), dinp = random_vector(N * C, 5), dw = random_vector(C, 6),
                                                   db = random_vector(C, 7);
  Tensor dx = on_device(x), d_w = on_device(w), d_b = on_device(b), d_dout = on_device(dout), d_out = on_device(out),
         d_mean = on_device(mean), d_rstd = on_device(rstd), d_dinp = on_device(dinp), d_dw = on_device(dw),
         d_db = on_device(db);
  kernels::layernorm_forward(d_out.data<float>(), d_mean.data<float>(), d_rstd.data<float>(), dx.data<float>(),
                             d_w.data<float>(), d_b.data<float>(), N, C, 1e-5f);
  kernels::layernorm_backward(d_dinp.data<float>(), d_dw.data<float>(), d_db.data<float>(), d_dout.data<float>(),
                              dx.data<float>(), d_w.data<float>(), d_mean.data<float>(), d_rstd.data<float>(), N, C);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
  cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                          rstd.data(), N, C);
  expect_close(on_host<float>(d_out), out, C, "layernorm out");
  expect_close(on_host<float>(d_mean), mean, C, "layernorm mean");
  expect_close(on_host<float>(d_rstd), rstd, C, "layernorm rstd");
  expect_close(on_host<float>(d_dinp), dinp, C, "layernorm dinp (+=)");
  expect_close(on_host<float>(d_dw), dw, N, "layernorm dweight (+=)");
  expect_close(on_host<float>(d_db), db, N, "layernorm dbias (+=)");
}

TEST_F(CudaRows, RmsNormMatchesCpu) {
  const int N = 9, C = 100;
  const std::vector<float> x = random_vector(N * C, 8), w = random_vector(C, 9), dout = random_vector(N * C, 10);
  std::vector<float> out(N * C), rstd(N), dinp = random_vector(N * C, 11), dw = random_vector(C, 12);
  Tensor dx = on_device(x), d_w = on_device(w), d_dout = on_device(dout), d_out = on_device(out),
         d_rstd = on_device(rstd), d_dinp = on_device(dinp), d_dw = on_device(dw);
  kernels::rmsnorm_forward(d_out.data<float>(), d_rstd.data<float>(), dx.data<float>(), d_w.data<float>(), N, C, 1e-6f);
  kernels::rmsnorm_backward(d_dinp.data<float>(), d_dw.data<float>(), d_dout.data<float>(), dx.data<float>(),
                            d_w.data<float>(), d_rstd.data<float>(), N, C);
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
  cpu::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  expect_close(on_host<float>(d_out), out, C, "rmsnorm out");
  expect_close(on_host<float>(d_rstd), rstd, C, "rmsnorm rstd");
  expect_close(on_host<float>(d_dinp), dinp, C, "rmsnorm dinp (+=)");
  expect_close(on_host<float>(d_dw), dw, N, "rmsnorm dweight (+=)");
}

// One attention case: forward outputs, lse and probabilities, then backward into random
// gradients (+=), cuda against cpu.
void check_attention(int B, int T, int NH, int NKV, int HS, const std::vector<int32_t>* starts) {
  const int q_n = B * T * NH * HS, kv_n = B * T * NKV * HS;
  const std::vector<float> q = random_vector(q_n, 13), k = random_vector(kv_n, 14), v = random_vector(kv_n, 15),
                           dout = random_vector(q_n, 16);
  std::vector<float> out(q_n), lse(B * NH * T), att(static_cast<size_t>(B) * NH * T * T, -1.0f),
      dq = random_vector(q_n, 17), dk = random_vector(kv_n, 18), dv = random_vector(kv_n, 19);
  Tensor d_q = on_device(q), d_k = on_device(k), d_v = on_device(v), d_dout = on_device(dout), d_out = on_device(out),
         d_lse = on_device(lse), d_att = on_device(att), d_dq = on_device(dq), d_dk = on_device(dk),
         d_dv = on_device(dv);
  Tensor d_starts = starts ? on_device(*starts) : Tensor();
  const int32_t* s_dev = starts ? d_starts.data<int32_t>() : nullptr;
  const int32_t* s_host = starts ? starts->data() : nullptr;
  kernels::attention_forward(d_out.data<float>(), d_lse.data<float>(), d_att.data<float>(), d_q.data<float>(),
                             d_k.data<float>(), d_v.data<float>(), s_dev, B, T, NH, NKV, HS);
  kernels::attention_backward(d_dq.data<float>(), d_dk.data<float>(), d_dv.data<float>(), d_dout.data<float>(),
                              d_q.data<float>(), d_k.data<float>(), d_v.data<float>(), d_att.data<float>(), s_dev, B,
                              T, NH, NKV, HS);
  cpu::attention_forward(out.data(), lse.data(), att.data(), q.data(), k.data(), v.data(), s_host, B, T, NH, NKV, HS);
  cpu::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), att.data(),
                          s_host, B, T, NH, NKV, HS);
  const std::string what = "attention B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" +
                           std::to_string(NH) + " NKV=" + std::to_string(NKV) + (starts ? " with starts" : "");
  const double terms = static_cast<double>(T) * HS;
  expect_close(on_host<float>(d_out), out, terms, what + ": out");
  expect_close(on_host<float>(d_lse), lse, terms, what + ": lse");
  expect_close(on_host<float>(d_att), att, terms, what + ": att (zero where masked)");
  expect_close(on_host<float>(d_dq), dq, terms, what + ": dq (+=)");
  expect_close(on_host<float>(d_dk), dk, terms * NH / NKV, what + ": dk (+=)");
  expect_close(on_host<float>(d_dv), dv, terms * NH / NKV, what + ": dv (+=)");
}

TEST_F(CudaRows, AttentionMatchesCpu) {
  check_attention(2, 17, 4, 4, 16, nullptr);   // multi-head
  check_attention(1, 33, 6, 2, 40, nullptr);   // grouped K/V, head size not a multiple of 32
  check_attention(2, 5, 2, 1, 64, nullptr);    // multi-query
  std::vector<int32_t> starts(2 * 12);
  for (int t = 0; t < 12; ++t) {
    starts[t] = t < 5 ? 0 : 5;                  // two documents in sequence 0
    starts[12 + t] = t < 3 ? 0 : (t < 9 ? 3 : 9);  // three in sequence 1
  }
  check_attention(2, 12, 4, 2, 24, &starts);
}

TEST_F(CudaRows, AttentionRefusesWhatTheCpuRefuses) {
  std::vector<float> buf(4 * 4 * 4 * 300, 0.0f);
  Tensor d = on_device(buf);
  float* p = d.data<float>();
  testing::expect_error([&] { kernels::attention_forward(p, p, p, p, p, p, nullptr, 1, 4, 6, 4, 8); },
                        {"attention", "query heads (6)", "key/value heads (4)"});
  testing::expect_error([&] { kernels::attention_forward(p, p, p, p, p, p, nullptr, 1, 2, 1, 1, 300); },
                        {"attention", "head size 300"});
  std::vector<int32_t> starts = {0, 0, 3, 1};
  Tensor ds = on_device(starts);
  testing::expect_error([&] { kernels::attention_forward(p, p, p, p, p, p, ds.data<int32_t>(), 1, 4, 1, 1, 8); },
                        {"attention", "document start 3 of row 2", "[0, 2]"});
}

}  // namespace
}  // namespace ndt
