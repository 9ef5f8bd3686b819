// Saving one rank's checkpoint blocks without stopping training: the caller copies
// its state into a host snapshot (std::vector<TensorBlock>), hands it to start(),
// and goes on training while a background std::thread runs write_rank_file on it.
// At most one save is in flight; starting another first waits for it, and the time
// spent waiting is reported as blocked_seconds(). The background thread does no
// communication: waiting until every rank is done and then committing on rank 0
// (commit.h) is the caller's job, on its main thread. save_now() runs the same
// write on the caller's thread, for comparison and for the final save of a run.
#pragma once

#include "checkpoint/checkpoint.h"

#include <atomic>
#include <exception>
#include <filesystem>
#include <thread>
#include <vector>

namespace ndt::ckpt {

class AsyncSaver {
 public:
  AsyncSaver() = default;
  ~AsyncSaver();  // joins an in-flight save; call wait() first to see its errors
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  // Waits for the previous save (rethrowing its error), then writes `snapshot` to
  // tmp_dir as `rank`'s part on a background thread.
  void start(const std::filesystem::path& tmp_dir, int rank, std::vector<TensorBlock> snapshot);

  // Waits for the previous save (rethrowing its error), then writes on this thread.
  WriteStats save_now(const std::filesystem::path& tmp_dir, int rank,
                      const std::vector<TensorBlock>& blocks);

  // The snapshot of the last start(), handed back once its write is done (waits for it),
  // so the next save can refill the same buffers: refilling blocks of the same sizes
  // allocates nothing, which keeps page faults out of the time training is blocked.
  std::vector<TensorBlock> take_snapshot();

  bool done() const { return finished_.load(std::memory_order_acquire); }  // never blocks
  void wait();  // joins the save in flight, if any, and rethrows its error

  const WriteStats& last_stats() const { return last_stats_; }  // of the last successful save
  double blocked_seconds() const { return blocked_seconds_; }    // total, in start/save_now

 private:
  void wait_for_previous();

  std::thread thread_;
  std::vector<TensorBlock> snapshot_;  // written by the thread in flight
  std::atomic<bool> finished_{true};
  // Written by the background thread, read by wait() after the join.
  WriteStats pending_stats_;
  std::exception_ptr error_;
  WriteStats last_stats_;
  double blocked_seconds_ = 0;
};

}  // namespace ndt::ckpt
