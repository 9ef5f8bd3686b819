// The one-rank communicator (comm/self_communicator.h) and the one-rank mesh built on
// it: every collective is a copy (or nothing) and counted like the MPI backend's, a
// message sent to itself is received in order by tag, a receive with nothing sent is an
// error rather than a hang, and the mesh has every axis, each of size one.
#include "comm/device_mesh.h"
#include "comm/self_communicator.h"
#include "core/error.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace ndt {
namespace {

std::vector<float> iota(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Catches: a collective of one rank that changes the data (a sum that doubles, an
// average that divides) or drops it (an all-gather that leaves the output unwritten).
TEST(SelfCommunicator, EveryCollectiveIsACopyOfTheRanksOwnData) {
  SelfCommunicator comm("dp");
  std::vector<float> x = iota(6, 1.0f);
  comm.all_reduce(x.data(), x.size(), DType::f32, ReduceOp::sum);
  comm.all_reduce(x.data(), x.size(), DType::f32, ReduceOp::avg);
  EXPECT_EQ(x, iota(6, 1.0f));
  std::vector<float> out(6, -1.0f);
  comm.reduce_scatter(x.data(), out.data(), 6, DType::f32, ReduceOp::sum);
  EXPECT_EQ(out, x);
  std::fill(out.begin(), out.end(), -1.0f);
  comm.all_gather(x.data(), out.data(), 6, DType::f32);
  EXPECT_EQ(out, x);
  std::fill(out.begin(), out.end(), -1.0f);
  comm.all_to_all(x.data(), out.data(), 6, DType::f32);
  EXPECT_EQ(out, x);
  std::fill(out.begin(), out.end(), -1.0f);
  comm.all_to_all_v(x.data(), {4}, out.data(), {4}, DType::f32);
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 4), std::vector<float>(x.begin(), x.begin() + 4));
  EXPECT_EQ(out[4], -1.0f);
  comm.broadcast(x.data(), x.size(), DType::f32, 0);
  comm.barrier();
  EXPECT_EQ(x, iota(6, 1.0f));
}

// Catches: calls not counted (a one-rank run whose counters read zero calls), or wire
// bytes other than the formulas' for a group of one.
TEST(SelfCommunicator, CountsCallsPayloadAndWireLikeAnyBackend) {
  SelfCommunicator comm("tp");
  std::vector<float> x(8, 1.0f), y(8);
  comm.all_reduce(x.data(), 8, DType::f32, ReduceOp::sum);
  comm.all_reduce(x.data(), 8, DType::f32, ReduceOp::sum);
  comm.all_gather(x.data(), y.data(), 8, DType::f32);
  comm.send(x.data(), 8, DType::f32, 0, 3);
  comm.recv(y.data(), 8, DType::f32, 0, 3);
  const CommStats& s = comm.stats();
  EXPECT_EQ(s[CommOp::all_reduce].calls, 2);
  EXPECT_EQ(s[CommOp::all_reduce].payload_bytes, 64);
  EXPECT_EQ(s[CommOp::all_reduce].wire_bytes, 0);
  EXPECT_EQ(s[CommOp::all_gather].calls, 1);
  EXPECT_EQ(s[CommOp::all_gather].wire_bytes, 0);
  EXPECT_EQ(s[CommOp::send].wire_bytes, 32) << "a send moves its payload, to itself too";
  EXPECT_EQ(s[CommOp::recv].calls, 1);
  EXPECT_EQ(comm.axis(), "tp");
}

// Catches: messages to itself lost, reordered within a tag, or a receive that waits for
// ever for a send that no other rank can make.
TEST(SelfCommunicator, MessagesToItselfArriveInOrderByTag) {
  SelfCommunicator comm("pp");
  const std::vector<float> a = iota(3, 1.0f), b = iota(3, 10.0f), c = iota(2, 20.0f);
  std::vector<float> got(3), other(2);
  WorkHandle early = comm.irecv(other.data(), 2, DType::f32, 0, 7);  // posted before its send
  EXPECT_FALSE(early->test());
  comm.send(a.data(), 3, DType::f32, 0, 5);
  comm.send(b.data(), 3, DType::f32, 0, 5);
  comm.send(c.data(), 2, DType::f32, 0, 7);
  EXPECT_TRUE(early->test());
  EXPECT_EQ(other, c);
  comm.recv(got.data(), 3, DType::f32, 0, 5);
  EXPECT_EQ(got, a);
  comm.recv(got.data(), 3, DType::f32, 0, 5);
  EXPECT_EQ(got, b);
  try {
    comm.recv(got.data(), 3, DType::f32, 0, 5);
    ADD_FAILURE() << "a receive with nothing sent returned";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "recv on mesh axis \"pp\": nothing was sent with tag 5, and in a group of 1 rank nobody else can send it");
  }
  comm.send(a.data(), 3, DType::f32, 0, 9);
  EXPECT_THROW(comm.recv(other.data(), 2, DType::f32, 0, 9), Error) << "12 bytes sent, 8 expected";
  EXPECT_THROW(comm.send(a.data(), 3, DType::f32, 1, 0), Error) << "rank 1 of a group of 1";
}

// Catches: a one-rank mesh missing an axis (a "no mesh" branch elsewhere would be back).
TEST(SelfCommunicator, AOneRankMeshHasEveryAxisOfSizeOne) {
  DeviceMesh mesh;
  EXPECT_EQ(mesh.world().size(), 1);
  EXPECT_EQ(mesh.shape().product(), 1);
  for (size_t a = 0; a < kNumAxes; ++a) {
    const Axis axis = static_cast<Axis>(a);
    EXPECT_EQ(mesh.axis(axis).size(), 1) << axis_name(axis);
    EXPECT_EQ(mesh.axis(axis).rank(), 0) << axis_name(axis);
    EXPECT_EQ(mesh.coord(axis), 0) << axis_name(axis);
  }
  EXPECT_EQ(mesh.axis(Axis::tp).axis(), "tp");
}

}  // namespace
}  // namespace ndt
