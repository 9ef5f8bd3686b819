// Every collective of MpiCommunicator against a serial reference computed locally from
// the same deterministic per-rank inputs, on the world and on a split communicator
// (even / odd world ranks), for odd sizes and each dtype used; point-to-point rings;
// non-blocking operations in flight together and waited out of order; the counters;
// and the errors for what we refuse. Inputs are half-integers in [-8, 8] (integers for
// i32), exact in every type, so sums are exact in any order and results are compared
// bit for bit.
#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "core/dtype.h"
#include "core/error.h"
#include "mpi_env.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <functional>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace ndt {
namespace {

using testing::world;
using Bytes = std::vector<unsigned char>;

const size_t kSizes[] = {1, 7, 1000003};

// The number element i of rank r holds (salt varies it between uses).
double input(DType dtype, int rank, size_t i, int salt = 0) {
  const int k = static_cast<int>((i * 7 + static_cast<size_t>(rank) * 13 + static_cast<size_t>(salt) * 5) % 33) - 16;
  return dtype == DType::i32 ? k : 0.5 * k;
}

// Raw bits for movement-only types, a function of (rank, i).
uint16_t bits16(int rank, size_t i) { return static_cast<uint16_t>(rank * 7919 + i * 31 + (i >> 16)); }

void put(DType dtype, Bytes& buf, size_t i, double value) {
  unsigned char* p = buf.data() + i * dtype_size(dtype);
  switch (dtype) {
    case DType::f32: { const float v = static_cast<float>(value); std::memcpy(p, &v, 4); return; }
    case DType::i32: { const auto v = static_cast<int32_t>(value); std::memcpy(p, &v, 4); return; }
    case DType::bf16: { const uint16_t v = f32_to_bf16(static_cast<float>(value)); std::memcpy(p, &v, 2); return; }
    case DType::f16: { const uint16_t v = f32_to_f16(static_cast<float>(value)); std::memcpy(p, &v, 2); return; }
    case DType::u16: { const auto v = static_cast<uint16_t>(value); std::memcpy(p, &v, 2); return; }
    case DType::e4m3: p[0] = f32_to_e4m3(static_cast<float>(value)); return;
    case DType::e5m2: p[0] = f32_to_e5m2(static_cast<float>(value)); return;
  }
}

Bytes inputs(DType dtype, int rank, size_t count, int salt = 0) {
  Bytes buf(count * dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) put(dtype, buf, i, input(dtype, rank, i, salt));
  return buf;
}

// Movement payload: element i of rank r, for any dtype (raw bits, truncated to the width).
Bytes pattern(DType dtype, int rank, size_t count, size_t first = 0) {
  const size_t es = dtype_size(dtype);
  Bytes buf(count * es);
  for (size_t i = 0; i < count; ++i) {
    const uint16_t v = bits16(rank, first + i);
    std::memcpy(buf.data() + i * es, &v, std::min<size_t>(es, 2));
    if (es == 4) std::memcpy(buf.data() + i * es + 2, &v, 2);
  }
  return buf;
}

// The reduction of every rank's inputs, as the backend computes it: exact sum, max or min,
// avg = float(sum) / float(n) rounded to the type.
Bytes reference(DType dtype, ReduceOp op, int n, size_t count, size_t first = 0, int salt = 0) {
  Bytes buf(count * dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) {
    double acc = op == ReduceOp::max ? -1e30 : op == ReduceOp::min ? 1e30 : 0;
    for (int r = 0; r < n; ++r) {
      const double x = input(dtype, r, first + i, salt);
      acc = op == ReduceOp::max ? std::max(acc, x) : op == ReduceOp::min ? std::min(acc, x) : acc + x;
    }
    if (op == ReduceOp::avg) acc = static_cast<float>(acc) / static_cast<float>(n);
    put(dtype, buf, i, acc);
  }
  return buf;
}

// Compares buffers; on a mismatch reports the first differing element.
::testing::AssertionResult same(const Bytes& got, const Bytes& want, DType dtype) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  }
  const size_t es = dtype_size(dtype);
  for (size_t i = 0; i < got.size(); i += es) {
    if (std::memcmp(got.data() + i, want.data() + i, es) != 0) {
      uint32_t g = 0, w = 0;
      std::memcpy(&g, got.data() + i, es);
      std::memcpy(&w, want.data() + i, es);
      return ::testing::AssertionFailure() << dtype_name(dtype) << " element " << i / es << " of "
                                           << got.size() / es << ": bits 0x" << std::hex << g << " vs 0x" << w;
    }
  }
  return ::testing::AssertionSuccess();
}

// The world and the even/odd halves of it (each rank holds one half).
struct Groups {
  std::unique_ptr<Communicator> half = world().split(world().rank() % 2, world().rank(), "half");
  std::vector<Communicator*> all() { return {&world(), half.get()}; }
};

std::string where(const Communicator& c, DType d, size_t n, const char* how) {
  return std::string(c.axis()) + " size " + std::to_string(c.size()) + ", " + std::string(dtype_name(d)) + ", " +
         std::to_string(n) + " elements, " + how;
}

// ---------------------------------------------------------------------------------------------

// Catches: a wrong MPI dtype or op mapping (bf16/f16 sums, avg's division, max and min
// swapped or taken as sums), a split group reducing over the world.
TEST(Collectives, AllReduceMatchesSerialReference) {
  Groups groups;
  struct Case { DType dtype; ReduceOp op; };
  const Case cases[] = {{DType::f32, ReduceOp::sum}, {DType::f32, ReduceOp::avg}, {DType::f32, ReduceOp::max},
                        {DType::i32, ReduceOp::sum}, {DType::i32, ReduceOp::max}, {DType::bf16, ReduceOp::sum},
                        {DType::bf16, ReduceOp::avg}, {DType::bf16, ReduceOp::max}, {DType::f16, ReduceOp::sum},
                        {DType::f16, ReduceOp::avg}, {DType::f32, ReduceOp::min}, {DType::i32, ReduceOp::min},
                        {DType::bf16, ReduceOp::min}, {DType::f16, ReduceOp::max}, {DType::f16, ReduceOp::min}};
  for (Communicator* c : groups.all()) {
    for (const Case& k : cases) {
      for (size_t n : kSizes) {
        const Bytes want = reference(k.dtype, k.op, c->size(), n);
        Bytes buf = inputs(k.dtype, c->rank(), n);
        c->all_reduce(buf.data(), n, k.dtype, k.op);
        EXPECT_TRUE(same(buf, want, k.dtype)) << where(*c, k.dtype, n, "blocking") << " op " << int(k.op);
        buf = inputs(k.dtype, c->rank(), n);
        c->iall_reduce(buf.data(), n, k.dtype, k.op)->wait();
        EXPECT_TRUE(same(buf, want, k.dtype)) << where(*c, k.dtype, n, "async") << " op " << int(k.op);
      }
    }
  }
}

// Catches: reduce-scatter handing a rank another rank's block, or blocking and async paths that differ.
TEST(Collectives, ReduceScatterMatchesSerialReference) {
  Groups groups;
  struct Case { DType dtype; ReduceOp op; };
  const Case cases[] = {{DType::f32, ReduceOp::sum}, {DType::f32, ReduceOp::avg}, {DType::i32, ReduceOp::sum},
                        {DType::bf16, ReduceOp::sum}, {DType::f16, ReduceOp::sum}};
  for (Communicator* c : groups.all()) {
    for (const Case& k : cases) {
      for (size_t block : {size_t{1}, size_t{7}, size_t{250001}}) {
        const size_t total = block * c->size();
        const Bytes want = reference(k.dtype, k.op, c->size(), block, block * c->rank());
        const Bytes send = inputs(k.dtype, c->rank(), total);
        Bytes recv(block * dtype_size(k.dtype));
        c->reduce_scatter(send.data(), recv.data(), block, k.dtype, k.op);
        EXPECT_TRUE(same(recv, want, k.dtype)) << where(*c, k.dtype, block, "blocking");
        std::fill(recv.begin(), recv.end(), 0);
        c->ireduce_scatter(send.data(), recv.data(), block, k.dtype, k.op)->wait();
        EXPECT_TRUE(same(recv, want, k.dtype)) << where(*c, k.dtype, block, "async");
      }
    }
  }
}

// Catches: all-gather blocks out of rank order, or the in-place form overwriting this rank's own block.
TEST(Collectives, AllGatherMatchesSerialReference) {
  Groups groups;
  for (Communicator* c : groups.all()) {
    for (DType dtype : {DType::f32, DType::u16, DType::bf16}) {
      for (size_t block : {size_t{1}, size_t{7}, size_t{250001}}) {
        Bytes want;
        for (int r = 0; r < c->size(); ++r) {
          const Bytes part = pattern(dtype, r, block);
          want.insert(want.end(), part.begin(), part.end());
        }
        const Bytes mine = pattern(dtype, c->rank(), block);
        Bytes recv(want.size());
        c->all_gather(mine.data(), recv.data(), block, dtype);
        EXPECT_TRUE(same(recv, want, dtype)) << where(*c, dtype, block, "blocking");
        std::fill(recv.begin(), recv.end(), 0);
        c->iall_gather(mine.data(), recv.data(), block, dtype)->wait();
        EXPECT_TRUE(same(recv, want, dtype)) << where(*c, dtype, block, "async");
        // In place: this rank's block already sits in the receive buffer.
        std::fill(recv.begin(), recv.end(), 0);
        unsigned char* slot = recv.data() + mine.size() * c->rank();
        std::copy(mine.begin(), mine.end(), slot);
        c->all_gather(slot, recv.data(), block, dtype);
        EXPECT_TRUE(same(recv, want, dtype)) << where(*c, dtype, block, "in place");
      }
    }
  }
}

// Catches: all-to-all sending block j to the wrong rank, or transposing send and receive blocks.
TEST(Collectives, AllToAllMatchesSerialReference) {
  Groups groups;
  for (Communicator* c : groups.all()) {
    const int n = c->size(), me = c->rank();
    for (DType dtype : {DType::f32, DType::u16}) {
      for (size_t block : {size_t{1}, size_t{7}, size_t{100003}}) {
        // Block j of rank r's send buffer is pattern(r, elements [j * block, (j + 1) * block)).
        const Bytes send = pattern(dtype, me, block * n);
        Bytes want;
        for (int j = 0; j < n; ++j) {
          const Bytes part = pattern(dtype, j, block, block * me);
          want.insert(want.end(), part.begin(), part.end());
        }
        Bytes recv(want.size());
        c->all_to_all(send.data(), recv.data(), block, dtype);
        EXPECT_TRUE(same(recv, want, dtype)) << where(*c, dtype, block, "blocking");
        std::fill(recv.begin(), recv.end(), 0);
        c->iall_to_all(send.data(), recv.data(), block, dtype)->wait();
        EXPECT_TRUE(same(recv, want, dtype)) << where(*c, dtype, block, "async");
      }
    }
  }
}

// Rank r sends count(r, j) elements to rank j, zero for some pairs (including to itself).
size_t v_count(int from, int to, size_t scale) { return static_cast<size_t>((from + 2 * to + 1) % 4) * scale; }

// Catches: all-to-all-v displacements computed wrongly for uneven or zero counts (e.g. counts mistaken for offsets).
TEST(Collectives, AllToAllVUnevenCountsIncludingZeros) {
  Groups groups;
  for (Communicator* c : groups.all()) {
    const int n = c->size(), me = c->rank();
    for (DType dtype : {DType::f32, DType::e4m3}) {
      for (size_t scale : {size_t{1}, size_t{5}, size_t{30011}}) {
        std::vector<size_t> send_counts(n), recv_counts(n);
        Bytes send, want;
        for (int j = 0; j < n; ++j) {
          send_counts[j] = v_count(me, j, scale);
          recv_counts[j] = v_count(j, me, scale);
          // The block from r to j is pattern(r, count, first = 1000 * j).
          const Bytes out = pattern(dtype, me, send_counts[j], 1000 * static_cast<size_t>(j));
          send.insert(send.end(), out.begin(), out.end());
          const Bytes in = pattern(dtype, j, recv_counts[j], 1000 * static_cast<size_t>(me));
          want.insert(want.end(), in.begin(), in.end());
        }
        Bytes recv(want.size() + 1);  // +1: never a zero-sized vector's null data()
        recv.pop_back();
        c->all_to_all_v(send.data(), send_counts, recv.data(), recv_counts, dtype);
        EXPECT_TRUE(same(recv, want, dtype)) << where(*c, dtype, scale, "blocking");
        std::fill(recv.begin(), recv.end(), 0);
        c->iall_to_all_v(send.data(), send_counts, recv.data(), recv_counts, dtype)->wait();
        EXPECT_TRUE(same(recv, want, dtype)) << where(*c, dtype, scale, "async");
      }
    }
  }
}

// Catches: broadcast that ignores its root and always sends rank 0's buffer.
TEST(Collectives, BroadcastFromNonZeroRoot) {
  Groups groups;
  for (Communicator* c : groups.all()) {
    const int root = c->size() - 1;  // non-zero whenever the group has two ranks or more
    for (DType dtype : {DType::f32, DType::bf16}) {
      for (size_t n : kSizes) {
        const Bytes want = pattern(dtype, root, n);
        Bytes buf = c->rank() == root ? want : Bytes(want.size(), 0);
        c->broadcast(buf.data(), n, dtype, root);
        EXPECT_TRUE(same(buf, want, dtype)) << where(*c, dtype, n, "blocking");
        buf = c->rank() == root ? want : Bytes(want.size(), 0);
        c->ibroadcast(buf.data(), n, dtype, root)->wait();
        EXPECT_TRUE(same(buf, want, dtype)) << where(*c, dtype, n, "async");
      }
    }
  }
}

// Catches: point-to-point messages matched to the wrong peer or tag, blocking or non-blocking.
TEST(PointToPoint, RingExchange) {
  Groups groups;
  for (Communicator* c : groups.all()) {
    const int n = c->size(), me = c->rank();
    const int next = (me + 1) % n, prev = (me + n - 1) % n;
    for (size_t count : kSizes) {
      // Non-blocking: post the receive, send, wait both (any order).
      const Bytes out = pattern(DType::f32, me, count);
      Bytes in(out.size(), 0);
      WorkHandle r = c->irecv(in.data(), count, DType::f32, prev, 3);
      WorkHandle s = c->isend(out.data(), count, DType::f32, next, 3);
      s->wait();
      r->wait();
      EXPECT_TRUE(same(in, pattern(DType::f32, prev, count), DType::f32)) << where(*c, DType::f32, count, "async ring");
      // Blocking: even ranks send first, odd ranks receive first (a ring of even length).
      if (n % 2 == 0) {
        std::fill(in.begin(), in.end(), 0);
        if (me % 2 == 0) {
          c->send(out.data(), count, DType::f32, next, 5);
          c->recv(in.data(), count, DType::f32, prev, 5);
        } else {
          c->recv(in.data(), count, DType::f32, prev, 5);
          c->send(out.data(), count, DType::f32, next, 5);
        }
        EXPECT_TRUE(same(in, pattern(DType::f32, prev, count), DType::f32)) << where(*c, DType::f32, count, "blocking ring");
      }
    }
  }
}

// Catches: a short or truncated message accepted silently instead of raised as an error.
TEST(PointToPoint, MessageOfWrongLengthIsAnError) {
  Communicator& c = world();
  if (c.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int me = c.rank(), n = c.size();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  std::vector<float> out(7, 1.0f), in(7, 0.0f);
  // Shorter than expected: received, then refused.
  WorkHandle s = c.isend(out.data(), 5, DType::f32, next, 9);
  try {
    c.recv(in.data(), 7, DType::f32, prev, 9);
    ADD_FAILURE() << "a 5-element message was accepted as 7";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected 7 elements of f32 from rank " + std::to_string(prev)),
              std::string::npos) << e.what();
  }
  s->wait();
  // Longer than the buffer: MPI's truncation error, as an ndt::Error.
  s = c.isend(out.data(), 7, DType::f32, next, 10);
  WorkHandle r = c.irecv(in.data(), 5, DType::f32, prev, 10);
  EXPECT_THROW(r->wait(), Error);
  s->wait();
}

// ---------------------------------------------------------------------------------------------

// Catches: async operations interfering in flight, needing in-order waits, or skipping avg's division in test().
TEST(Async, SeveralInFlightWaitedOutOfOrder) {
  Communicator& c = world();
  const int n = c.size(), me = c.rank();
  const size_t big = 1000003, block = 100003;
  Bytes a = inputs(DType::f32, me, big, 1);
  Bytes b = inputs(DType::bf16, me, big, 2);
  const Bytes rs_send = inputs(DType::f32, me, block * n, 3);
  Bytes rs_recv(block * 4);
  const Bytes ag_send = pattern(DType::u16, me, block);
  Bytes ag_recv(ag_send.size() * n);
  Bytes bc = me == 0 ? pattern(DType::f32, 0, 7) : Bytes(28, 0);

  std::vector<WorkHandle> works;
  works.push_back(c.iall_reduce(a.data(), big, DType::f32, ReduceOp::sum));
  works.push_back(c.iall_reduce(b.data(), big, DType::bf16, ReduceOp::avg));
  works.push_back(c.ireduce_scatter(rs_send.data(), rs_recv.data(), block, DType::f32, ReduceOp::avg));
  works.push_back(c.iall_gather(ag_send.data(), ag_recv.data(), block, DType::u16));
  works.push_back(c.ibroadcast(bc.data(), 7, DType::f32, 0));
  // Poll one to completion with test() (which must also run avg's division), wait the
  // rest last to first.
  while (!works[2]->test()) {
  }
  EXPECT_TRUE(works[2]->test());  // stays done
  for (size_t i = works.size(); i-- > 0;) works[i]->wait();
  works[0]->wait();  // waiting twice is harmless

  EXPECT_TRUE(same(a, reference(DType::f32, ReduceOp::sum, n, big, 0, 1), DType::f32));
  EXPECT_TRUE(same(b, reference(DType::bf16, ReduceOp::avg, n, big, 0, 2), DType::bf16));
  EXPECT_TRUE(same(rs_recv, reference(DType::f32, ReduceOp::avg, n, block, block * me, 3), DType::f32));
  Bytes ag_want;
  for (int r = 0; r < n; ++r) {
    const Bytes part = pattern(DType::u16, r, block);
    ag_want.insert(ag_want.end(), part.begin(), part.end());
  }
  EXPECT_TRUE(same(ag_recv, ag_want, DType::u16));
  EXPECT_TRUE(same(bc, pattern(DType::f32, 0, 7), DType::f32));
}

// Reduce-scatters of 2 MiB and more run as ndtrain's own ring of point-to-point steps:
// several in flight at once (each with its own tag), completed by test() or by wait()
// in reverse order, on the world and on split groups: on 4 ranks also one of 3 (an odd
// ring, whose partials alternate between the output and a scratch block) and one of 1.
// Catches: concurrent ring reduce-scatters sharing a tag (cross-talk), ring blocks reduced or placed wrongly, or a
// ring whose last partial does not land in the output.
TEST(Async, RingReduceScattersInFlightTogether) {
  Groups groups;
  std::vector<Communicator*> comms = groups.all();
  std::unique_ptr<Communicator> three_and_one;
  if (world().size() == 4) {
    three_and_one = world().split(world().rank() < 3 ? 0 : 1, world().rank(), "three_and_one");
    comms.push_back(three_and_one.get());
  }
  for (Communicator* c : comms) {
    const int n = c->size(), me = c->rank();
    const size_t block = 600001;  // n x 2.4 MB: above the ring threshold for any n
    std::vector<Bytes> sends, recvs;
    for (int k = 0; k < 3; ++k) {
      sends.push_back(inputs(DType::f32, me, block * n, 10 + k));
      recvs.emplace_back(block * 4);
    }
    std::vector<WorkHandle> works;
    for (int k = 0; k < 3; ++k) {
      works.push_back(c->ireduce_scatter(sends[k].data(), recvs[k].data(), block, DType::f32,
                                         k == 1 ? ReduceOp::avg : ReduceOp::sum));
    }
    while (!works[1]->test()) {
    }
    for (size_t k = works.size(); k-- > 0;) works[k]->wait();
    for (int k = 0; k < 3; ++k) {
      EXPECT_TRUE(same(recvs[k], reference(DType::f32, k == 1 ? ReduceOp::avg : ReduceOp::sum, n, block, block * me, 10 + k),
                       DType::f32))
          << where(*c, DType::f32, block, "ring reduce-scatter in flight with others");
    }
    // The blocking form takes the same path.
    Bytes blocking(block * 4);
    c->reduce_scatter(sends[0].data(), blocking.data(), block, DType::f32, ReduceOp::sum);
    EXPECT_TRUE(same(blocking, recvs[0], DType::f32)) << where(*c, DType::f32, block, "blocking ring");
  }
}

// Catches: a dropped Work handle that abandons its operation, leaving the buffer unreduced.
TEST(Async, DestroyingAWorkWaitsForIt) {
  Communicator& c = world();
  const size_t count = 1000003;
  Bytes buf = inputs(DType::f32, c.rank(), count, 4);
  c.iall_reduce(buf.data(), count, DType::f32, ReduceOp::avg);  // handle dropped at once
  EXPECT_TRUE(same(buf, reference(DType::f32, ReduceOp::avg, c.size(), count, 0, 4), DType::f32));
}

// ---------------------------------------------------------------------------------------------

// Catches: split ignoring the key order or mixing colors, and a negative color accepted.
TEST(Split, GroupsRanksByColorOrderedByKey) {
  Communicator& w = world();
  // Reverse order within each color: the highest world rank of a parity gets rank 0.
  auto half = w.split(w.rank() % 2, -w.rank(), "half");
  const int same_parity = (w.size() - w.rank() % 2 + 1) / 2;
  EXPECT_EQ(half->axis(), "half");
  EXPECT_EQ(half->size(), same_parity);
  int32_t me = w.rank();
  std::vector<int32_t> members(half->size());
  half->all_gather(&me, members.data(), 1, DType::i32);
  std::vector<int32_t> want;
  for (int r = w.size() - 1; r >= 0; --r) {
    if (r % 2 == w.rank() % 2) want.push_back(r);
  }
  EXPECT_EQ(members, want);
  EXPECT_EQ(members[half->rank()], w.rank());
  EXPECT_THROW(w.split(-1, 0, "bad"), Error);
}

// ---------------------------------------------------------------------------------------------

// Catches: a collective not counted, or counted with the wrong payload or wire-byte formula.
TEST(Counters, CountCallsPayloadAndWireBytesExactly) {
  Communicator& w = world();
  auto c = w.split(0, w.rank(), "counted");  // every rank, fresh counters
  const int64_t n = c->size(), me = c->rank();
  std::vector<float> buf(1001), big(1001 * n);
  std::vector<size_t> counts(n), recv_counts(n);
  for (int j = 0; j < n; ++j) {
    counts[j] = static_cast<size_t>(j + 1);
    recv_counts[j] = static_cast<size_t>(me + 1);
  }
  std::vector<float> v_send(static_cast<size_t>(n * (n + 1) / 2)), v_recv(static_cast<size_t>((me + 1) * n));

  c->all_reduce(buf.data(), 1001, DType::f32, ReduceOp::sum);
  c->iall_reduce(buf.data(), 1001, DType::bf16, ReduceOp::sum)->wait();
  c->reduce_scatter(big.data(), buf.data(), 1001, DType::f32, ReduceOp::sum);
  c->all_gather(buf.data(), big.data(), 1001, DType::f32);
  c->all_gather(buf.data(), big.data(), 500, DType::u16);
  c->all_to_all(big.data(), std::vector<float>(big.size()).data(), 1001, DType::f32);
  c->all_to_all_v(v_send.data(), counts, v_recv.data(), recv_counts, DType::f32);
  c->broadcast(buf.data(), 1001, DType::f32, 0);
  c->barrier();
  c->ibarrier()->wait();
  WorkHandle r = c->irecv(buf.data(), 10, DType::f32, (me + n - 1) % n, 1);
  c->send(big.data(), 10, DType::f32, (me + 1) % n, 1);
  r->wait();

  const CommStats& s = c->stats();
  auto expect = [&](CommOp op, int64_t calls, int64_t payload, int64_t wire) {
    EXPECT_EQ(s[op].calls, calls) << comm_op_name(op);
    EXPECT_EQ(s[op].payload_bytes, payload) << comm_op_name(op);
    EXPECT_EQ(s[op].wire_bytes, wire) << comm_op_name(op);
    EXPECT_GE(s[op].wait_seconds, 0.0) << comm_op_name(op);
  };
  expect(CommOp::all_reduce, 2, 4004 + 2002, 2 * (n - 1) * 4004 / n + 2 * (n - 1) * 2002 / n);
  expect(CommOp::reduce_scatter, 1, 4004 * n, (n - 1) * 4004);
  expect(CommOp::all_gather, 2, 4004 * n + 1000 * n, (n - 1) * 4004 + (n - 1) * 1000);
  expect(CommOp::all_to_all, 1, 4004 * n, (n - 1) * 4004);
  // Rank me sends j + 1 floats to each rank j: n(n+1)/2 in all, me + 1 of them to itself.
  expect(CommOp::all_to_all_v, 1, 4 * n * (n + 1) / 2, 4 * (n * (n + 1) / 2 - (me + 1)));
  expect(CommOp::broadcast, 1, 4004, me == 0 ? 4004 : 0);
  expect(CommOp::barrier, 2, 0, 0);
  expect(CommOp::send, 1, 40, 40);
  expect(CommOp::recv, 1, 40, 0);
  EXPECT_EQ(s.total_wire_bytes(), s[CommOp::all_reduce].wire_bytes + s[CommOp::reduce_scatter].wire_bytes +
                                      s[CommOp::all_gather].wire_bytes + s[CommOp::all_to_all].wire_bytes +
                                      s[CommOp::all_to_all_v].wire_bytes + s[CommOp::broadcast].wire_bytes + 40);
  EXPECT_GT(s.total_wait_seconds(), 0.0);
  EXPECT_EQ(comm_wire_bytes(CommOp::all_reduce, 1000, 4), 1500);
  EXPECT_EQ(comm_wire_bytes(CommOp::reduce_scatter, 1000, 4), 750);
  EXPECT_THROW(comm_wire_bytes(CommOp::broadcast, 1000, 4), Error);
}

// Starts a non-blocking operation (`start`) and polls it until it is done; expects the
// counter of `op` to hold nearly all of that time as progress and none as a wait: the
// loop does nothing but start and poll.
void expect_start_and_polls_counted_as_progress(Communicator& c, CommOp op, const std::function<WorkHandle()>& start) {
  const auto t0 = std::chrono::steady_clock::now();
  WorkHandle work = start();
  int polls = 0;
  while (!work->test()) ++polls;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(c.stats()[op].progress_seconds, 0.5 * elapsed) << polls << " polls";
  EXPECT_EQ(c.stats()[op].wait_seconds, 0.0);
}

// Catches: the time a non-blocking collective's start and its test() polls take (where
// Open MPI moves the data of its non-blocking collectives, on the caller's core) left out
// of the counters, so that a step's profile shows it as unaccounted, or counted as a wait.
TEST(Counters, StartAndPollsOfANonBlockingCollectiveCountAsProgress) {
  Communicator& w = world();
  auto c = w.split(0, w.rank(), "polled");
  std::vector<float> buf(size_t{1} << 20, 1.0f);
  expect_start_and_polls_counted_as_progress(
      *c, CommOp::all_reduce, [&] { return c->iall_reduce(buf.data(), buf.size(), DType::f32, ReduceOp::sum); });
  const CommCounter& counter = c->stats()[CommOp::all_reduce];
  EXPECT_EQ(c->stats().total_progress_seconds(), counter.progress_seconds);
  EXPECT_EQ(buf[0], static_cast<float>(c->size()));
  // A blocking call is a wait, not progress.
  const double progress = counter.progress_seconds;
  c->all_reduce(buf.data(), buf.size(), DType::f32, ReduceOp::sum);
  EXPECT_GT(counter.wait_seconds, 0.0);
  EXPECT_EQ(counter.progress_seconds, progress);
}

// Catches: the same left out for the ring reduce-scatter that f32 sums of 2 MiB and more
// take (comm/ring_reduce_scatter.h), whose polls also add each step's partials: FSDP's
// gradients on 4 ranks of the development VM left 18-34 ms of a 145-180 ms step unaccounted.
TEST(Counters, StartAndPollsOfTheRingReduceScatterCountAsProgress) {
  Communicator& w = world();
  auto c = w.split(0, w.rank(), "polled ring");
  const size_t total = size_t{1} << 20;  // 4 MiB of f32: the ring's
  const size_t block = total / static_cast<size_t>(c->size());
  std::vector<float> send(block * static_cast<size_t>(c->size()), 1.0f), recv(block, 0.0f);
  expect_start_and_polls_counted_as_progress(*c, CommOp::reduce_scatter, [&] {
    return c->ireduce_scatter(send.data(), recv.data(), block, DType::f32, ReduceOp::sum);
  });
  EXPECT_EQ(recv[0], static_cast<float>(c->size()));
  EXPECT_EQ(recv.back(), static_cast<float>(c->size()));
}

// ---------------------------------------------------------------------------------------------

// Catches: a nested MpiRuntime initialising or finalising MPI a second time.
TEST(MpiRuntime, ASecondRuntimeLeavesMpiToTheFirst) {
  MpiRuntime nested;  // main() already started MPI
  EXPECT_FALSE(nested.owns_mpi());
  EXPECT_EQ(nested.world_rank(), world().rank());
  EXPECT_EQ(nested.world_size(), world().size());
  EXPECT_GE(static_cast<int>(nested.thread_level()), static_cast<int>(MpiThreadLevel::serialized));
  auto dup = mpi_world("again");  // collective: every rank
  EXPECT_EQ(dup->axis(), "again");
  EXPECT_EQ(dup->size(), world().size());
}

// ---------------------------------------------------------------------------------------------
// Refusals happen before any communication, identically on every rank.

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Catches: bad dtypes, ranks, tags, counts or overlapping buffers reaching MPI (or counted) instead of refused.
TEST(Errors, RefusedReductionsAndArgumentsNameTheProblem) {
  Communicator& c = world();
  const CommStats before = c.stats();
  std::vector<uint16_t> buf(16);
  std::vector<float> f(16 * c.size());
  auto has = [](const std::string& message, const std::string& part) {
    return message.find(part) != std::string::npos ? ::testing::AssertionSuccess()
                                                   : ::testing::AssertionFailure() << message;
  };
  for (DType dtype : {DType::e4m3, DType::e5m2, DType::u16}) {
    const std::string m = error_of([&] { c.all_reduce(buf.data(), 4, dtype, ReduceOp::sum); });
    EXPECT_TRUE(has(m, std::string("dtype ") + std::string(dtype_name(dtype)) + " is not supported"));
    EXPECT_TRUE(has(m, "all_reduce on mesh axis \"world\""));
  }
  EXPECT_TRUE(has(error_of([&] { c.ireduce_scatter(f.data(), buf.data(), 1, DType::e4m3, ReduceOp::sum); }),
                  "reduce_scatter on mesh axis \"world\": reduction (sum) on dtype e4m3"));
  EXPECT_TRUE(has(error_of([&] { c.all_reduce(f.data(), 4, DType::i32, ReduceOp::avg); }),
                  "ReduceOp::avg is not supported for i32"));
  const size_t too_many = size_t{INT_MAX} + 1;
  EXPECT_TRUE(has(error_of([&] { c.all_reduce(nullptr, too_many, DType::f32, ReduceOp::sum); }),
                  "2147483648 elements exceed INT_MAX (2147483647)"));
  EXPECT_TRUE(has(error_of([&] { c.iall_gather(nullptr, nullptr, size_t{INT_MAX} / c.size() + 1, DType::u16); }),
                  "exceed INT_MAX"));
  EXPECT_TRUE(has(error_of([&] { c.send(f.data(), 1, DType::f32, c.size(), 0); }),
                  "destination rank " + std::to_string(c.size()) + " is outside the group of"));
  EXPECT_TRUE(has(error_of([&] { c.irecv(f.data(), 1, DType::f32, 0, -1); }), "tag -1 is outside [0, "));
  EXPECT_TRUE(has(error_of([&] { c.broadcast(f.data(), 1, DType::f32, -1); }), "root rank -1 is outside"));
  const std::vector<size_t> wrong(c.size() + 1, 1);
  EXPECT_TRUE(has(error_of([&] { c.all_to_all_v(f.data(), wrong, f.data(), wrong, DType::f32); }),
                  "send_counts has " + std::to_string(c.size() + 1) + " entries for a group of"));
  // Overlapping send and receive buffers (other than all_gather's in-place form).
  EXPECT_TRUE(has(error_of([&] { c.all_to_all(f.data(), f.data(), 1, DType::f32); }), "overlap"));
  EXPECT_TRUE(has(error_of([&] { c.reduce_scatter(f.data(), f.data(), 1, DType::f32, ReduceOp::sum); }), "overlap"));
  // Nothing refused was counted.
  for (size_t op = 0; op < kNumCommOps; ++op) EXPECT_EQ(c.stats().ops[op].calls, before.ops[op].calls) << op;
}

}  // namespace
}  // namespace ndt
