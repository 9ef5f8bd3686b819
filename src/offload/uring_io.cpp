#include "offload/uring_io.h"

#include "core/error.h"
#include "core/timing.h"
#include "offload/io_stats.h"

#include <cerrno>
#include <chrono>
#include <cstring>

namespace ndt::offload {

UringIo::UringIo(int queue_depth) : depth_(queue_depth) {
  const int rc = io_uring_queue_init(static_cast<unsigned>(queue_depth), &ring_, 0);
  NDT_CHECK(rc == 0,
            "offload.io = \"io_uring\": io_uring cannot start here ({}; the kernel setting kernel.io_uring_disabled or a "
            "container's seccomp profile can forbid it): use offload.io = \"threads\"",
            std::strerror(-rc));
}

UringIo::~UringIo() {
  while (in_flight_ > 0) reap_one();  // the buffers must not be freed under the kernel
  io_uring_queue_exit(&ring_);
}

void UringIo::push(uint64_t ticket, const Active& a) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  NDT_CHECK(sqe != nullptr, "offload: the io_uring submission ring is full ({} in flight)", in_flight_);
  char* bytes = static_cast<char*>(a.request.buffer) + a.moved;
  const unsigned length = static_cast<unsigned>(a.request.bytes - a.moved);
  const uint64_t offset = static_cast<uint64_t>(a.request.offset) + a.moved;
  if (a.request.write) {
    io_uring_prep_write(sqe, a.request.fd, bytes, length, offset);
  } else {
    io_uring_prep_read(sqe, a.request.fd, bytes, length, offset);
  }
  io_uring_sqe_set_data64(sqe, ticket);
  int rc;
  while ((rc = io_uring_submit(&ring_)) == -EINTR) {
  }
  NDT_CHECK(rc >= 0, "offload: io_uring_submit failed: {}", std::strerror(-rc));
  ++in_flight_;
}

uint64_t UringIo::submit(const IoRequest& request) {
  NDT_CHECK(request.bytes <= (size_t{1} << 30), "offload: an I/O request of {} bytes is larger than 1 GiB",
            request.bytes);
  while (in_flight_ >= depth_) reap_one();
  const uint64_t ticket = next_ticket_++;
  const Active active{request, 0};
  push(ticket, active);
  active_.emplace(ticket, active);
  return ticket;
}

void UringIo::reap_one() {
  io_uring_cqe* cqe = nullptr;
  int rc;
  while ((rc = io_uring_wait_cqe(&ring_, &cqe)) == -EINTR) {
  }
  NDT_CHECK(rc == 0, "offload: io_uring_wait_cqe failed: {}", std::strerror(-rc));
  const uint64_t ticket = io_uring_cqe_get_data64(cqe);
  const int res = cqe->res;
  io_uring_cqe_seen(&ring_, cqe);
  --in_flight_;
  auto it = active_.find(ticket);
  if (it == active_.end()) return;
  Active& a = it->second;
  if (res > 0) a.moved += static_cast<size_t>(res);
  if (res > 0 && a.moved < a.request.bytes) {  // short: the rest as a new request
    push(ticket, a);
    return;
  }
  done_[ticket] = res < 0 ? res : static_cast<int64_t>(a.moved);
  active_.erase(it);
}

int64_t UringIo::wait(uint64_t ticket) {
  auto it = done_.find(ticket);
  if (it == done_.end()) {
    const auto t0 = std::chrono::steady_clock::now();
    while ((it = done_.find(ticket)) == done_.end()) {
      NDT_CHECK(active_.count(ticket) > 0, "offload: ticket {} is not in flight", ticket);
      reap_one();
    }
    count_io_wait(seconds_since(t0));
  }
  const int64_t result = it->second;
  done_.erase(it);
  return result;
}

}  // namespace ndt::offload
