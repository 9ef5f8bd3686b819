// A folder every rank of a communicator names the same (rank 0's pid and a counter),
// created empty by rank 0 and removed at scope exit: where a multi-rank test's run
// writes its checkpoints.
#pragma once

#include "comm/communicator.h"

#include <unistd.h>

#include <filesystem>
#include <string>

namespace ndt::testing {

class SharedDir {
 public:
  explicit SharedDir(Communicator& comm) : comm_(comm) {
    static int counter = 0;
    int32_t id[2] = {static_cast<int32_t>(::getpid()), counter++};
    comm.broadcast(id, 2, DType::i32, 0);
    path_ = std::filesystem::path("/tmp") / ("ndt_shared_" + std::to_string(id[0]) + "_" + std::to_string(id[1]));
    if (comm.rank() == 0) std::filesystem::remove_all(path_), std::filesystem::create_directories(path_);
    comm.barrier();
  }
  ~SharedDir() {
    comm_.barrier();
    std::error_code ec;
    if (comm_.rank() == 0) std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  Communicator& comm_;
  std::filesystem::path path_;
};

}  // namespace ndt::testing
