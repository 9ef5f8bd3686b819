// DeviceMesh: which world ranks share each axis's communicator, coordinates, and the
// error for a mesh that does not match the world.
#include "comm/device_mesh.h"
#include "core/error.h"
#include "mpi_env.h"

#include <gtest/gtest.h>

#include <vector>

namespace ndt {
namespace {

// World ranks of the members of `axis`, in the communicator's rank order.
std::vector<int> members(DeviceMesh& mesh, Axis axis) {
  Communicator& comm = mesh.axis(axis);
  int32_t me = mesh.world().rank();
  std::vector<int32_t> all(comm.size());
  comm.all_gather(&me, all.data(), 1, DType::i32);
  return {all.begin(), all.end()};
}

// Catches: the dp axes built over the wrong ranks, or tp not collapsing to each rank alone on a pure dp mesh.
TEST(DeviceMesh, AllDataParallel) {
  Communicator& world = testing::world();
  DeviceMesh mesh(world, MeshShape{1, world.size(), 1, 1, 1});
  std::vector<int> everyone;
  for (int r = 0; r < world.size(); ++r) everyone.push_back(r);
  EXPECT_EQ(members(mesh, Axis::dp_replicate), everyone);
  EXPECT_EQ(members(mesh, Axis::dp), everyone);
  EXPECT_EQ(members(mesh, Axis::tp), std::vector<int>{world.rank()});
  EXPECT_EQ(mesh.coord(Axis::dp), world.rank());
  EXPECT_EQ(mesh.axis(Axis::dp).axis(), "dp");
}

// Catches: mesh axes split in the wrong order (tp not innermost, pp not outermost), dp not replicate x shard.
TEST(DeviceMesh, TensorParallelIsInnermost) {
  Communicator& world = testing::world();
  if (world.size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const int r = world.rank();
  DeviceMesh mesh(world, MeshShape{1, 2, 1, 1, 2});  // dp_replicate=2 x tp=2
  EXPECT_EQ(members(mesh, Axis::tp), (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
  EXPECT_EQ(members(mesh, Axis::dp_replicate), (std::vector<int>{r % 2, r % 2 + 2}));
  EXPECT_EQ(mesh.coord(Axis::tp), r % 2);
  EXPECT_EQ(mesh.coord(Axis::dp_replicate), r / 2);

  DeviceMesh hsdp(world, MeshShape{1, 2, 2, 1, 1});  // dp = dp_replicate x dp_shard
  EXPECT_EQ(members(hsdp, Axis::dp), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(members(hsdp, Axis::dp_shard), (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
  EXPECT_EQ(members(hsdp, Axis::dp_replicate), (std::vector<int>{r % 2, r % 2 + 2}));
  EXPECT_EQ(hsdp.coord(Axis::dp), r);

  DeviceMesh pipeline(world, MeshShape{2, 1, 1, 1, 2});  // pp outermost
  EXPECT_EQ(members(pipeline, Axis::pp), (std::vector<int>{r % 2, r % 2 + 2}));
}

// Catches: a mesh larger than the world (or with an axis of 0) accepted silently instead of refused with the sizes.
TEST(DeviceMesh, RefusesAMeshThatDoesNotMatchTheWorld) {
  Communicator& world = testing::world();
  try {
    DeviceMesh mesh(world, MeshShape{1, world.size() + 1, 1, 1, 1});
    FAIL() << "accepted a mesh larger than the world";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("has " + std::to_string(world.size() + 1) + " ranks but the job has " +
                           std::to_string(world.size())),
              std::string::npos)
        << message;
  }
  EXPECT_THROW(MeshShape({1, 0, 1, 1, 1}).validate(world.size()), Error);
}

}  // namespace
}  // namespace ndt
