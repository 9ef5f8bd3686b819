// SelfCommunicator: the group of one rank, so that a single-process run has a device
// mesh like any other (every axis of size one) and the code that trains, shards and
// checkpoints has no second, mesh-less path. Splits nothing and moves no bytes between
// ranks: every collective is a copy from the send buffer to the receive buffer (none
// when they are the same memory, and none at all for all_reduce, broadcast and
// barrier), complete when the call returns. A send is kept in a mailbox until a
// receive with its tag takes it (posted before or after); waiting on a receive with
// nothing sent fails, naming the axis and the tag, since no other rank can send it.
//
// Every call is counted like the MPI backend's (payload; wire bytes by the formulas
// of communicator.h for a group of one, which are zero except for send), so the
// counters of a one-rank run read as those of any run.
#pragma once

#include "comm/communicator.h"

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace ndt {

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string axis = "world") : axis_(std::move(axis)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& axis() const override { return axis_; }

  WorkHandle iall_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override;
  WorkHandle ireduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op) override;
  WorkHandle iall_gather(const void* send, void* recv, size_t send_count, DType dtype) override;
  WorkHandle iall_to_all(const void* send, void* recv, size_t count_per_rank, DType dtype) override;
  WorkHandle iall_to_all_v(const void* send, const std::vector<size_t>& send_counts, void* recv,
                           const std::vector<size_t>& recv_counts, DType dtype) override;
  WorkHandle isend(const void* buf, size_t count, DType dtype, int dst, int tag) override;
  WorkHandle irecv(void* buf, size_t count, DType dtype, int src, int tag) override;
  WorkHandle ibroadcast(void* buf, size_t count, DType dtype, int root) override;
  WorkHandle ibarrier() override;

  std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) override;
  std::unique_ptr<Communicator> split_by_node(const std::string& axis) override;

 private:
  // Counts the call and copies `bytes` from send to recv (nothing when they coincide).
  WorkHandle copy(CommOp op, const void* send, void* recv, size_t bytes);
  void check_self(CommOp op, const char* role, int peer) const;
  // The oldest message sent with `tag` into buf (its size checked), or false if none.
  bool take(void* buf, int64_t bytes, int tag);

  // A receive: complete once a message with its tag is in the mailbox; waiting for one
  // that was never sent is an error, not a hang.
  class MailboxRecv final : public Work {
   public:
    MailboxRecv(SelfCommunicator& comm, void* buf, int64_t bytes, int tag);
    bool test() override;
    void wait() override;

   private:
    SelfCommunicator& comm_;
    void* buf_;
    int64_t bytes_;
    int tag_;
    bool done_ = false;
  };

  std::string axis_;
  std::map<int, std::deque<std::vector<char>>> mailbox_;  // sent, not yet received, by tag
};

}  // namespace ndt
