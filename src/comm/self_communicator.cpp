#include "comm/self_communicator.h"

#include "core/error.h"

#include <cstring>

namespace ndt {

namespace {

// The operation is complete when the call returns.
class DoneWork final : public Work {
 public:
  bool test() override { return true; }
  void wait() override {}
};

void count_call(CommCounter& c, CommOp op, int64_t payload) {
  c.calls += 1;
  c.payload_bytes += payload;
  c.wire_bytes += op == CommOp::all_to_all_v || op == CommOp::broadcast ? 0 : comm_wire_bytes(op, payload, 1);
}

int64_t bytes_of(size_t count, DType dtype) { return static_cast<int64_t>(count * dtype_size(dtype)); }

}  // namespace

WorkHandle SelfCommunicator::copy(CommOp op, const void* send, void* recv, size_t bytes) {
  count_call(stats_[op], op, static_cast<int64_t>(bytes));
  if (bytes > 0 && send != recv) std::memmove(recv, send, bytes);
  return std::make_unique<DoneWork>();
}

void SelfCommunicator::check_self(CommOp op, const char* role, int peer) const {
  NDT_CHECK(peer == 0, "{} on mesh axis \"{}\": {} rank {} is outside the group of 1 rank", comm_op_name(op), axis_,
            role, peer);
}

WorkHandle SelfCommunicator::iall_reduce(void* buf, size_t count, DType dtype, ReduceOp) {
  return copy(CommOp::all_reduce, buf, buf, bytes_of(count, dtype));
}

WorkHandle SelfCommunicator::ireduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp) {
  return copy(CommOp::reduce_scatter, send, recv, bytes_of(recv_count, dtype));
}

WorkHandle SelfCommunicator::iall_gather(const void* send, void* recv, size_t send_count, DType dtype) {
  return copy(CommOp::all_gather, send, recv, bytes_of(send_count, dtype));
}

WorkHandle SelfCommunicator::iall_to_all(const void* send, void* recv, size_t count_per_rank, DType dtype) {
  return copy(CommOp::all_to_all, send, recv, bytes_of(count_per_rank, dtype));
}

WorkHandle SelfCommunicator::iall_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                           const std::vector<size_t>& recv_counts, DType dtype) {
  NDT_CHECK(send_counts.size() == 1 && recv_counts.size() == 1 && send_counts[0] == recv_counts[0],
            "all_to_all_v on mesh axis \"{}\": a group of 1 rank needs one send count and one equal receive count, "
            "got {} and {} entries",
            axis_, send_counts.size(), recv_counts.size());
  return copy(CommOp::all_to_all_v, send, recv, bytes_of(send_counts[0], dtype));
}

WorkHandle SelfCommunicator::isend(const void* buf, size_t count, DType dtype, int dst, int tag) {
  check_self(CommOp::send, "destination", dst);
  const int64_t bytes = bytes_of(count, dtype);
  count_call(stats_[CommOp::send], CommOp::send, bytes);
  const char* data = static_cast<const char*>(buf);
  mailbox_[tag].emplace_back(data, data + bytes);
  return std::make_unique<DoneWork>();
}

WorkHandle SelfCommunicator::irecv(void* buf, size_t count, DType dtype, int src, int tag) {
  check_self(CommOp::recv, "source", src);
  const int64_t bytes = bytes_of(count, dtype);
  count_call(stats_[CommOp::recv], CommOp::recv, bytes);
  auto work = std::make_unique<MailboxRecv>(*this, buf, bytes, tag);
  work->test();  // a message sent before is taken now
  return work;
}

bool SelfCommunicator::take(void* buf, int64_t bytes, int tag) {
  auto queue = mailbox_.find(tag);
  if (queue == mailbox_.end() || queue->second.empty()) return false;
  std::vector<char> message = std::move(queue->second.front());
  queue->second.pop_front();
  NDT_CHECK(static_cast<int64_t>(message.size()) == bytes,
            "recv on mesh axis \"{}\": expected {} bytes with tag {} but the message held {}", axis_, bytes, tag,
            message.size());
  if (bytes > 0) std::memcpy(buf, message.data(), message.size());
  return true;
}

SelfCommunicator::MailboxRecv::MailboxRecv(SelfCommunicator& comm, void* buf, int64_t bytes, int tag)
    : comm_(comm), buf_(buf), bytes_(bytes), tag_(tag) {}

bool SelfCommunicator::MailboxRecv::test() {
  if (!done_) done_ = comm_.take(buf_, bytes_, tag_);
  return done_;
}

void SelfCommunicator::MailboxRecv::wait() {
  NDT_CHECK(test(), "recv on mesh axis \"{}\": nothing was sent with tag {}, and in a group of 1 rank nobody else "
            "can send it", comm_.axis_, tag_);
}

WorkHandle SelfCommunicator::ibroadcast(void* buf, size_t count, DType dtype, int root) {
  check_self(CommOp::broadcast, "root", root);
  return copy(CommOp::broadcast, buf, buf, bytes_of(count, dtype));
}

WorkHandle SelfCommunicator::ibarrier() { return copy(CommOp::barrier, nullptr, nullptr, 0); }

std::unique_ptr<Communicator> SelfCommunicator::split(int color, int, const std::string& axis) {
  NDT_CHECK(color >= 0, "split of mesh axis \"{}\" into \"{}\": color {} must be non-negative", axis_, axis, color);
  return std::make_unique<SelfCommunicator>(axis);
}

std::unique_ptr<Communicator> SelfCommunicator::split_by_node(const std::string& axis) {
  return std::make_unique<SelfCommunicator>(axis);
}

}  // namespace ndt
