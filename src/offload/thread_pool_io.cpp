#include "offload/thread_pool_io.h"

#include "core/timing.h"
#include "offload/io_stats.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>

namespace ndt::offload {

int64_t transfer_blocking(const IoRequest& r) {
  size_t moved = 0;
  char* bytes = static_cast<char*>(r.buffer);
  while (moved < r.bytes) {
    const ssize_t n = r.write ? ::pwrite(r.fd, bytes + moved, r.bytes - moved, r.offset + static_cast<int64_t>(moved))
                              : ::pread(r.fd, bytes + moved, r.bytes - moved, r.offset + static_cast<int64_t>(moved));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) break;  // the end of the file (a read), or a device that takes no more
    moved += static_cast<size_t>(n);
  }
  return static_cast<int64_t>(moved);
}

ThreadPoolIo::ThreadPoolIo(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
}

ThreadPoolIo::~ThreadPoolIo() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_all();
  for (std::thread& t : threads_) t.join();
}

uint64_t ThreadPoolIo::submit(const IoRequest& request) {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ticket = next_ticket_++;
    queue_.emplace_back(ticket, request);
  }
  queued_.notify_one();
  return ticket;
}

int64_t ThreadPoolIo::wait(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = done_.find(ticket);
  if (it == done_.end()) {
    const auto t0 = std::chrono::steady_clock::now();
    finished_.wait(lock, [&] { return (it = done_.find(ticket)) != done_.end(); });
    count_io_wait(seconds_since(t0));
  }
  const int64_t result = it->second;
  done_.erase(it);
  return result;
}

void ThreadPoolIo::work() {
  for (;;) {
    std::pair<uint64_t, IoRequest> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      job = queue_.front();
      queue_.pop_front();
    }
    const int64_t result = transfer_blocking(job.second);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_[job.first] = result;
    }
    finished_.notify_all();
  }
}

}  // namespace ndt::offload
