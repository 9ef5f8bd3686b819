#include "kernels/cpu/gemm_lowp.h"

#include "core/error.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/instruction_rate.h"
#include "kernels/cpu/lowp_bits.h"

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

static_assert(DNNL_VERSION_MAJOR == 2,
              "gemm_lowp.cpp uses the oneDNN 2.x matmul API (matmul::desc); 3.x changed it");

namespace ndt::cpu {
namespace {

constexpr const char* kEnvVar = "NDT_LOWP_GEMM";
constexpr const char* kFallbackName = "fallback: fp32 convert + OpenBLAS sgemm";

// Fallback blocks: op(A) in kMc x kKc, op(B) in kKc x kNc fp32 pieces (8 MiB per thread
// at most), large enough that sgemm runs at full speed on each.
constexpr int kMc = 2048, kNc = 2048, kKc = 512;
// Elements below which a block converts on the calling thread.
constexpr int64_t kParallelMin = int64_t{1} << 16;

int dtype_index(DType dtype) {
  NDT_CHECK(dtype == DType::bf16 || dtype == DType::f16,
            "gemm_lowp: dtype must be bf16 or f16, got {}", dtype_name(dtype));
  return dtype == DType::bf16 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------
// oneDNN

dnnl::engine& onednn_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

[[noreturn]] void onednn_fail(const dnnl::error& e, const std::string& what) {
  fail("oneDNN {}: {} (dnnl_status_t {})", what, e.what(), static_cast<int>(e.status));
}

// Everything a matmul primitive depends on; oneDNN plans its work split for the thread
// count at creation, so that is part of the key.
struct MatmulKey {
  DType dtype;
  bool trans_a, trans_b;
  int M, N, K, lda, ldb, ldc;
  float beta;
  int threads;
  auto tie() const { return std::tie(dtype, trans_a, trans_b, M, N, K, lda, ldb, ldc, beta, threads); }
  bool operator<(const MatmulKey& o) const { return tie() < o.tie(); }
};

std::string shape_text(const MatmulKey& k) {
  return fmt::format("{} matmul M={} N={} K={} trans_a={} trans_b={} lda={} ldb={} ldc={} beta={}",
                     dtype_name(k.dtype), k.M, k.N, k.K, k.trans_a, k.trans_b, k.lda, k.ldb, k.ldc,
                     k.beta);
}

// The primitive descriptor oneDNN picks for the key, or nothing if it has none at all.
std::optional<dnnl::matmul::primitive_desc> matmul_desc(const MatmulKey& k) {
  using md = dnnl::memory;
  const auto type = k.dtype == DType::bf16 ? md::data_type::bf16 : md::data_type::f16;
  // Row-major X[r, c] at r * ld + c; its transpose is the same memory with swapped strides.
  const md::desc a({k.M, k.K}, type, k.trans_a ? md::dims{1, k.lda} : md::dims{k.lda, 1});
  const md::desc b({k.K, k.N}, type, k.trans_b ? md::dims{1, k.ldb} : md::dims{k.ldb, 1});
  const md::desc c({k.M, k.N}, md::data_type::f32, md::dims{k.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // the calling thread's (onednn_gemm)
  if (k.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(k.beta);  // C = acc + beta * C
    attr.set_post_ops(ops);
  }
  try {
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, onednn_engine());
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented) return std::nullopt;
    onednn_fail(e, "creating a " + shape_text(k));
  }
}

bool is_native(const dnnl::matmul::primitive_desc& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) != 0;
}

std::mutex g_mutex;  // guards everything below that is mutable

struct CachedMatmul {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c, scratchpad;
};

// The cached primitive for the key; null where oneDNN has only reference code for it.
const CachedMatmul* cached_matmul(const MatmulKey& key) {
  static std::map<MatmulKey, std::optional<CachedMatmul>> cache;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = cache.find(key);
  if (it == cache.end()) {
    std::optional<CachedMatmul> entry;
    auto pd = matmul_desc(key);
    if (pd && is_native(*pd)) {
      try {
        entry.emplace(CachedMatmul{dnnl::matmul(*pd), pd->src_desc(), pd->weights_desc(), pd->dst_desc(),
                                   pd->scratchpad_desc()});
      } catch (const dnnl::error& e) {
        onednn_fail(e, "compiling a " + shape_text(key));
      }
    }
    it = cache.emplace(key, std::move(entry)).first;
  }
  return it->second ? &*it->second : nullptr;
}

// One thread's memory objects and argument map for a cached matmul, made at its first
// call on that thread; later calls only point them at their operands. Creating the four
// memory objects and the map on every call took about a fifth of a small call's time (the
// attention's 64 x 64 blocks make tens of thousands of calls a step).
struct BoundMatmul {
  dnnl::memory a, b, c, pad;
  std::unordered_map<int, dnnl::memory> args;  // holds the same memory objects
};

BoundMatmul& bound_matmul(const CachedMatmul& mm) {
  thread_local std::unordered_map<const CachedMatmul*, BoundMatmul> bound;
  auto it = bound.find(&mm);
  if (it == bound.end()) {
    const dnnl::engine& engine = onednn_engine();
    BoundMatmul m{dnnl::memory(mm.a, engine, nullptr), dnnl::memory(mm.b, engine, nullptr),
                  dnnl::memory(mm.c, engine, nullptr), dnnl::memory(mm.scratchpad, engine, nullptr), {}};
    m.args = {{DNNL_ARG_SRC, m.a}, {DNNL_ARG_WEIGHTS, m.b}, {DNNL_ARG_DST, m.c}, {DNNL_ARG_SCRATCHPAD, m.pad}};
    it = bound.emplace(&mm, std::move(m)).first;
  }
  return it->second;
}

// Runs the key's matmul on oneDNN; false if oneDNN has no native kernel for this shape.
bool onednn_gemm(const MatmulKey& key, const uint16_t* A, const uint16_t* B, float* C) {
  const CachedMatmul* mm = cached_matmul(key);
  if (mm == nullptr) return false;
  try {
    thread_local dnnl::stream stream(onednn_engine());
    // Each calling thread's own scratchpad, kept between calls: threads may run primitives
    // at once, and no call allocates once it has grown. Page-aligned, as oneDNN aligns its
    // own (its packed blocks are laid out from the start; misaligned, the kernels slow down).
    constexpr uintptr_t kAlign = 4096;
    thread_local std::vector<uint8_t> scratch;
    scratch.resize(std::max(scratch.size(), mm->scratchpad.get_size() + kAlign));
    auto* pad_at = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(scratch.data()) + kAlign - 1) & ~(kAlign - 1));
    BoundMatmul& m = bound_matmul(*mm);
    // oneDNN's memory objects take non-const handles; it only reads A and B.
    m.a.set_data_handle(const_cast<uint16_t*>(A));
    m.b.set_data_handle(const_cast<uint16_t*>(B));
    m.c.set_data_handle(C);
    m.pad.set_data_handle(pad_at);
    mm->primitive.execute(stream, m.args);
    stream.wait();
  } catch (const dnnl::error& e) {
    onednn_fail(e, "running a " + shape_text(key));
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Fallback

// dst[rows, cols] (dense) = float(src[r * ld + c]). Rows convert on the calling thread
// (lowp_bits::decode_row): inside a region (the attention's one-thread GEMMs) a nested
// region per call, even of one thread, cost more than the conversion.
void convert_block(DType dtype, const uint16_t* src, int64_t ld, int rows, int cols, float* dst) {
  const bool parallel = static_cast<int64_t>(rows) * cols >= kParallelMin && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (parallel)
  for (int r = 0; r < rows; ++r) {
    lowp_bits::decode_row(dtype, src + r * ld, dst + static_cast<int64_t>(r) * cols, cols);
  }
}

// op(X)[i0 .. i0 + ni, j0 .. j0 + nj] to fp32 as stored: ni x nj, or nj x ni when X is
// transposed (then the block is rows j0.. and columns i0.. of the stored matrix).
void convert_op_block(DType dtype, const uint16_t* X, int ld, bool trans, int i0, int ni, int j0,
                      int nj, float* dst) {
  if (trans) {
    convert_block(dtype, X + static_cast<int64_t>(j0) * ld + i0, ld, nj, ni, dst);
  } else {
    convert_block(dtype, X + static_cast<int64_t>(i0) * ld + j0, ld, ni, nj, dst);
  }
}

void fallback_gemm(const MatmulKey& k, const uint16_t* A, const uint16_t* B, float* C) {
  thread_local std::vector<float> a_block, b_block;
  a_block.resize(static_cast<size_t>(std::min(k.M, kMc)) * std::min(k.K, kKc));
  b_block.resize(static_cast<size_t>(std::min(k.K, kKc)) * std::min(k.N, kNc));
  for (int m0 = 0; m0 < k.M; m0 += kMc) {
    const int mb = std::min(kMc, k.M - m0);
    for (int k0 = 0; k0 < k.K; k0 += kKc) {
      const int kb = std::min(kKc, k.K - k0);
      convert_op_block(k.dtype, A, k.lda, k.trans_a, m0, mb, k0, kb, a_block.data());
      const float beta = k0 == 0 ? k.beta : 1.0f;  // later K blocks add to the first
      for (int n0 = 0; n0 < k.N; n0 += kNc) {
        const int nb = std::min(kNc, k.N - n0);
        convert_op_block(k.dtype, B, k.ldb, k.trans_b, k0, kb, n0, nb, b_block.data());
        gemm(k.trans_a, k.trans_b, mb, nb, kb, 1.0f, a_block.data(), k.trans_a ? mb : kb,
             b_block.data(), k.trans_b ? kb : nb, beta, C + static_cast<int64_t>(m0) * k.ldc + n0,
             k.ldc);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Backend choice

// oneDNN's implementation for a dense linear-layer shape of dtype, "" if not native.
std::string probe_onednn(DType dtype) {
  auto pd = matmul_desc({dtype, false, true, 256, 256, 256, 256, 256, 256, 0.0f, 1});
  return pd && is_native(*pd) ? std::string(pd->impl_info_str()) : std::string();
}

std::optional<LowpGemmBackend> g_chosen[2];  // per dtype_index, under g_mutex

void check_available(DType dtype, LowpGemmBackend backend) {
  NDT_CHECK(backend != LowpGemmBackend::onednn || !onednn_lowp_impl(dtype).empty(),
            "gemm_lowp: oneDNN {}.{} has no native {} matmul on this CPU (it offers only "
            "reference code, or none); use the fallback backend",
            DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR, dtype_name(dtype));
}

// oneDNN's kernels built on AVX512-BF16's dot product (not AMX's tiles, not its jit gemm,
// which converts to fp32 itself).
bool is_dot_product_kernel(const std::string& onednn_impl) {
  return onednn_impl.find("avx512_core_bf16") != std::string::npos;
}

// The bf16 dot product's rate over the FMA's (instruction_rate.h), measured once, where it
// decides the default: oneDNN's bf16 matmul on its dot-product kernel; else 0.
double dot_over_fma_where_it_decides(DType dtype) {
  if (dtype != DType::bf16 || !is_dot_product_kernel(onednn_lowp_impl(dtype))) return 0.0;
  static const double ratio = bf16_dot_over_fma_rate();
  return ratio;
}

}  // namespace

std::string onednn_lowp_impl(DType dtype) {
  static const std::string impl[2] = {probe_onednn(DType::bf16), probe_onednn(DType::f16)};
  return impl[dtype_index(dtype)];
}

LowpGemmBackend default_lowp_gemm_backend(const std::string& onednn_impl, double dot_over_fma) {
  if (onednn_impl.empty()) return LowpGemmBackend::fallback;
  if (!is_dot_product_kernel(onednn_impl)) return LowpGemmBackend::onednn;
  return dot_over_fma >= 1.0 ? LowpGemmBackend::onednn : LowpGemmBackend::fallback;
}

LowpGemmBackend choose_lowp_gemm_backend(DType dtype, const char* env_value) {
  const std::string value = env_value != nullptr ? env_value : "";
  if (value.empty()) return default_lowp_gemm_backend(onednn_lowp_impl(dtype), dot_over_fma_where_it_decides(dtype));
  if (value == "fallback") return LowpGemmBackend::fallback;
  NDT_CHECK(value == "onednn", "{}={}: unknown value (valid: onednn, fallback)", kEnvVar, value);
  NDT_CHECK(!onednn_lowp_impl(dtype).empty(),
            "{}={}: oneDNN {}.{} has no native {} matmul on this CPU (only reference code or none); "
            "unset {} or set it to fallback",
            kEnvVar, value, DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR, dtype_name(dtype), kEnvVar);
  return LowpGemmBackend::onednn;
}

LowpGemmBackend active_lowp_gemm_backend(DType dtype) {
  const int i = dtype_index(dtype);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_chosen[i]) g_chosen[i] = choose_lowp_gemm_backend(dtype, std::getenv(kEnvVar));
  return *g_chosen[i];
}

void set_lowp_gemm_backend(DType dtype, LowpGemmBackend backend) {
  const int i = dtype_index(dtype);
  check_available(dtype, backend);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_chosen[i] = backend;
}

std::string lowp_gemm_backend(DType dtype) {
  if (active_lowp_gemm_backend(dtype) == LowpGemmBackend::onednn) {
    return "oneDNN " + onednn_lowp_impl(dtype);
  }
  const std::string impl = onednn_lowp_impl(dtype);
  if (impl.empty()) {
    return fmt::format("{} (oneDNN has no native {} matmul on this CPU)", kFallbackName,
                       dtype_name(dtype));
  }
  const double dot_over_fma = dot_over_fma_where_it_decides(dtype);
  if (default_lowp_gemm_backend(impl, dot_over_fma) == LowpGemmBackend::fallback) {
    return fmt::format("{} (faster than oneDNN's {} here: this CPU's bf16 dot product runs at {:.2f}x its fp32 FMA "
                       "rate)",
                       kFallbackName, impl, dot_over_fma);
  }
  return kFallbackName;
}

void gemm_lowp_on(LowpGemmBackend backend, DType dtype, bool trans_a, bool trans_b, int M, int N, int K,
                  const uint16_t* A, int lda, const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  dtype_index(dtype);
  NDT_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_lowp: negative size M={} N={} K={}", M, N, K);
  NDT_CHECK(std::isfinite(beta), "gemm_lowp: beta must be finite, got {}", beta);
  check_available(dtype, backend);
  if (M == 0 || N == 0) return;
  if (K == 0) {  // no products: C = beta * C, with beta = 0 not reading C
    for (int m = 0; m < M; ++m) {
      float* row = C + static_cast<int64_t>(m) * ldc;
      for (int n = 0; n < N; ++n) row[n] = beta == 0.0f ? 0.0f : beta * row[n];
    }
    return;
  }
  const MatmulKey key{dtype, trans_a, trans_b, M, N, K, lda, ldb, ldc, beta, omp_get_max_threads()};
  if (backend == LowpGemmBackend::onednn && onednn_gemm(key, A, B, C)) return;
  fallback_gemm(key, A, B, C);
}

void gemm_lowp(DType dtype, bool trans_a, bool trans_b, int M, int N, int K, const uint16_t* A,
               int lda, const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  gemm_lowp_on(active_lowp_gemm_backend(dtype), dtype, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta,
            C, ldc);
}

void linear_forward_lowp(DType dtype, float* out, const uint16_t* inp, const uint16_t* weight,
                         const float* bias, int N, int IC, int OC) {
  // out[N, OC] = inp[N, IC] @ weight[OC, IC]^T
  gemm_lowp(dtype, false, true, N, OC, IC, inp, IC, weight, IC, 0.0f, out, OC);
  if (bias != nullptr) add_bias(out, bias, N, OC);
}

void linear_backward_lowp(DType dtype, float* dinp, float* dweight, const uint16_t* dout,
                          const uint16_t* inp, const uint16_t* weight, int N, int IC, int OC) {
  if (dinp != nullptr) {
    // dinp[N, IC] += dout[N, OC] @ weight[OC, IC]
    gemm_lowp(dtype, false, false, N, IC, OC, dout, OC, weight, IC, 1.0f, dinp, IC);
  }
  if (dweight != nullptr) {
    // dweight[OC, IC] += dout[N, OC]^T @ inp[N, IC]
    gemm_lowp(dtype, true, false, OC, IC, N, dout, OC, inp, IC, 1.0f, dweight, IC);
  }
}

}  // namespace ndt::cpu
