// The "threads" backend of AsyncIo (offload/async_io.h): a pool of threads, each taking
// a request from one queue and running blocking pread/pwrite until it is done or fails.
// Parallelism comes from the threads (each blocked in the kernel while the disk works);
// the cost is a thread wake-up per request and a lock per submit and completion.
#pragma once

#include "offload/async_io.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ndt::offload {

class ThreadPoolIo final : public AsyncIo {
 public:
  explicit ThreadPoolIo(int threads);
  ~ThreadPoolIo() override;  // finishes the queued requests, then joins
  IoBackend backend() const override { return IoBackend::threads; }
  uint64_t submit(const IoRequest& request) override;
  int64_t wait(uint64_t ticket) override;

 private:
  void work();

  std::mutex mutex_;
  std::condition_variable queued_, finished_;
  std::deque<std::pair<uint64_t, IoRequest>> queue_;
  std::unordered_map<uint64_t, int64_t> done_;
  uint64_t next_ticket_ = 1;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// The whole transfer with blocking calls (pread/pwrite, retried after EINTR and short
// transfers): the bytes moved (fewer only at the end of a file being read), or -errno.
int64_t transfer_blocking(const IoRequest& request);

}  // namespace ndt::offload
