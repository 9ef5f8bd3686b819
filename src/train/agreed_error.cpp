#include "train/agreed_error.h"

#include "core/error.h"

#include <cstdint>

namespace ndt {

void throw_if_any_rank_failed(DeviceMesh& mesh, const std::string& error) {
  Communicator& world = mesh.world();
  if (world.size() == 1) {
    NDT_CHECK(error.empty(), "{}", error);
    return;
  }
  // The lowest failing rank (the world's size: none failed).
  int32_t first = error.empty() ? world.size() : world.rank();
  world.all_reduce(&first, 1, DType::i32, ReduceOp::min);
  if (first == world.size()) return;
  int32_t length = static_cast<int32_t>(error.size());
  world.broadcast(&length, 1, DType::i32, first);
  // The message travels as 16-bit words (the smallest type the communicator has).
  std::string message = world.rank() == first ? error : std::string(static_cast<size_t>(length), ' ');
  message.resize(static_cast<size_t>(length + 1) / 2 * 2, '\0');
  world.broadcast(message.data(), message.size() / 2, DType::u16, first);
  message.resize(static_cast<size_t>(length));
  fail("rank {}: {}", first, message);
}

}  // namespace ndt
