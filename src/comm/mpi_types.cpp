// MPI datatypes and reduction ops for ndtrain's DType and ReduceOp, and the helpers
// MpiCommunicator and the ring reduce-scatter share (see mpi_types.h).
#include "comm/mpi_types.h"
#include "comm/watchdog.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace ndt {

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::i32: return MPI_INT32_T;
    case DType::u16:
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;
    case DType::e4m3:
    case DType::e5m2: return MPI_UINT8_T;
  }
  fail("invalid dtype value {}", static_cast<int>(dtype));
}

namespace {

// ---------------------------------------------------------------------------------------------
// bf16 / f16 reductions: widen a chunk of both operands to f32, combine, round back.

template <DType D, ReduceOp Op>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  constexpr int kChunk = 1024;
  float a[kChunk], b[kChunk];
  auto* src = static_cast<const uint16_t*>(in);
  auto* dst = static_cast<uint16_t*>(inout);
  for (int first = 0; first < *len; first += kChunk) {
    const int n = std::min(kChunk, *len - first);
    convert(src + first, D, a, DType::f32, static_cast<size_t>(n));
    convert(dst + first, D, b, DType::f32, static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      b[i] = Op == ReduceOp::max ? std::max(a[i], b[i]) : Op == ReduceOp::min ? std::min(a[i], b[i]) : a[i] + b[i];
    }
    convert(b, DType::f32, dst + first, D, static_cast<size_t>(n));
  }
}

// The user-defined ops of one 16-bit float type: sum (avg's too: divided on completion),
// max and min.
struct HalfOps {
  MPI_Op sum, max, min;
  MPI_Op of(ReduceOp op) const { return op == ReduceOp::max ? max : op == ReduceOp::min ? min : sum; }
};

template <DType D>
HalfOps create_half_ops() {
  HalfOps o{};
  MPI_Op_create(&half_reduce<D, ReduceOp::sum>, 1, &o.sum);
  MPI_Op_create(&half_reduce<D, ReduceOp::max>, 1, &o.max);
  MPI_Op_create(&half_reduce<D, ReduceOp::min>, 1, &o.min);
  return o;
}

// Created on first use (after MPI_Init), never freed: MPI_Finalize releases them.
const HalfOps& bf16_ops() {
  static const HalfOps ops = create_half_ops<DType::bf16>();
  return ops;
}
const HalfOps& f16_ops() {
  static const HalfOps ops = create_half_ops<DType::f16>();
  return ops;
}

// MPI's predefined op for f32 and i32.
MPI_Op builtin_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : op == ReduceOp::min ? MPI_MIN : MPI_SUM; }

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

}  // namespace

namespace mpi_detail {

std::string where(CommOp op, const std::string& axis) {
  return fmt::format("{} on mesh axis \"{}\"", comm_op_name(op), axis);
}

// The MPI op for a reduction, or an error for a dtype/op pair we do not reduce.
MPI_Op reduction(CommOp what, const std::string& axis, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::f32:
      return builtin_op(op);
    case DType::i32:
      NDT_CHECK(op != ReduceOp::avg, "{}: ReduceOp::avg is not supported for i32 (an integer average "
                "would truncate); use sum and divide", where(what, axis));
      return builtin_op(op);
    case DType::bf16:
      return bf16_ops().of(op);
    case DType::f16:
      return f16_ops().of(op);
    case DType::u16:
    case DType::e4m3:
    case DType::e5m2: break;
  }
  fail("{}: reduction ({}) on dtype {} is not supported: {} is for data movement only; reduce in f32, "
       "bf16 or f16", where(what, axis), reduce_op_name(op), dtype_name(dtype), dtype_name(dtype));
}

void check_mpi(int rc, CommOp what, const std::string& axis, std::string_view peers) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail("{}: MPI error {}: {}{}", where(what, axis), rc, std::string_view(text, static_cast<size_t>(len)),
       unreachable_peers_note(peers));
}

// ReduceOp::avg: the sum divided by the group size, in f32 for the 16-bit types.
void divide(void* buf, size_t count, DType dtype, int n) {
  if (dtype == DType::f32) {
    auto* p = static_cast<float*>(buf);
    for (size_t i = 0; i < count; ++i) p[i] /= static_cast<float>(n);
    return;
  }
  constexpr size_t kChunk = 1024;
  float tmp[kChunk];
  auto* p = static_cast<uint16_t*>(buf);
  for (size_t first = 0; first < count; first += kChunk) {
    const size_t len = std::min(kChunk, count - first);
    convert(p + first, dtype, tmp, DType::f32, len);
    for (size_t i = 0; i < len; ++i) tmp[i] /= static_cast<float>(n);
    convert(tmp, DType::f32, p + first, dtype, len);
  }
}

}  // namespace mpi_detail
}  // namespace ndt
