// The "io_uring" backend of AsyncIo (offload/async_io.h), through liburing: requests go
// into the submission ring (one io_uring_submit system call each, no thread hand-off),
// the kernel runs them and posts completions, which wait() reaps. A short transfer is
// resubmitted for its remainder. At most queue_depth requests are in flight; a submit
// beyond that first reaps a completion.
#pragma once

#include "offload/async_io.h"

#include <liburing.h>

#include <unordered_map>

namespace ndt::offload {

class UringIo final : public AsyncIo {
 public:
  explicit UringIo(int queue_depth);  // throws when io_uring cannot start here
  ~UringIo() override;                // reaps what is still in flight first
  IoBackend backend() const override { return IoBackend::io_uring; }
  uint64_t submit(const IoRequest& request) override;
  int64_t wait(uint64_t ticket) override;

 private:
  struct Active {
    IoRequest request;
    size_t moved = 0;
  };
  void push(uint64_t ticket, const Active& active);  // into the ring, submitted
  void reap_one();                                   // blocks for one completion

  io_uring ring_{};
  int depth_;
  int in_flight_ = 0;
  uint64_t next_ticket_ = 1;
  std::unordered_map<uint64_t, Active> active_;
  std::unordered_map<uint64_t, int64_t> done_;
};

}  // namespace ndt::offload
