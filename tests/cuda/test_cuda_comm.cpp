// The device communicators on one process: NCCL over a group of one (bootstrapped over
// the size-one communicator) and the host-staged fallback over the same: results in the
// device buffers and the counters of communicator.h. The layouts on several processes
// sharing one GPU (DDP, FSDP, tp, pp, cp over the host-staged fallback against one rank)
// are not written yet (docs/gpu.md).
#include "../common/gradcheck.h"
#include "comm/host_staged_communicator.h"
#include "comm/nccl_communicator.h"
#include "comm/self_communicator.h"
#include "cuda_test.h"

#include <memory>
#include <vector>

namespace ndt {
namespace {

using testing::CudaTest;
using testing::on_device;
using testing::on_host;
using testing::random_vector;

// all_reduce, all_gather, broadcast and a send/receive pair on a group of one: the data
// stays as it was (or is copied across) and every call is counted.
void exercise(Communicator& comm) {
  const std::vector<float> values = random_vector(1000, 1);
  Tensor buf = on_device(values), out = on_device(std::vector<float>(1000, 0.0f));
  comm.all_reduce(buf.data<float>(), 1000, DType::f32, ReduceOp::sum);
  EXPECT_EQ(on_host<float>(buf), values);
  comm.all_gather(buf.data<float>(), out.data<float>(), 1000, DType::f32);
  EXPECT_EQ(on_host<float>(out), values);
  comm.broadcast(buf.data<float>(), 1000, DType::f32, 0);
  EXPECT_EQ(comm.stats()[CommOp::all_reduce].calls, 1);
  EXPECT_EQ(comm.stats()[CommOp::all_reduce].payload_bytes, 4000);
  EXPECT_EQ(comm.stats()[CommOp::all_reduce].wire_bytes, 0) << "2(n-1)/n of the payload with n = 1";
  EXPECT_EQ(comm.stats()[CommOp::all_gather].payload_bytes, 4000);
  EXPECT_EQ(comm.stats()[CommOp::broadcast].calls, 1);
}

class CudaComm : public CudaTest {};

TEST_F(CudaComm, NcclOnAGroupOfOne) {
  NcclCommunicator comm(std::make_unique<SelfCommunicator>("dp"));
  EXPECT_EQ(comm.axis(), "dp");
  EXPECT_EQ(comm.size(), 1);
  exercise(comm);
}

TEST_F(CudaComm, HostStagedOnAGroupOfOne) {
  HostStagedCommunicator comm(std::make_unique<SelfCommunicator>("tp"));
  EXPECT_EQ(comm.axis(), "tp");
  exercise(comm);
}

}  // namespace
}  // namespace ndt
