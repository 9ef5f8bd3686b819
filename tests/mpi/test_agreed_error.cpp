// Errors the ranks agree on (train/agreed_error.h): every rank throws the message of the
// lowest failing rank, or none throws.
#include "comm/device_mesh.h"
#include "core/error.h"
#include "mpi_env.h"
#include "train/agreed_error.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

namespace ndt {
namespace {

// The message every rank throws (empty: none threw).
std::string agreed_message(DeviceMesh& mesh, const std::string& own) {
  try {
    throw_if_any_rank_failed(mesh, own);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Catches: the highest failing rank's message taken, another rank's length used for it, a
// rank that did not fail left without the error (it would wait in the next collective),
// or an error raised where no rank failed.
TEST(AgreedError, EveryRankThrowsTheLowestFailingRanksMessage) {
  Communicator& world = testing::world();
  const int n = world.size(), r = world.rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  DeviceMesh mesh(world, MeshShape{1, 1, n, 1, 1});
  EXPECT_EQ(agreed_message(mesh, ""), "");
  // The odd ranks fail, each with a message of its own length: rank 1's is taken whole.
  const std::string odd = r % 2 == 1 ? "failed here " + std::string(static_cast<size_t>(r), 'x') : "";
  EXPECT_EQ(agreed_message(mesh, odd), "rank 1: failed here x");
  // Only the last rank fails.
  EXPECT_EQ(agreed_message(mesh, r == n - 1 ? "the last one" : ""), fmt::format("rank {}: the last one", n - 1));
}

}  // namespace
}  // namespace ndt
