#include "checkpoint/async_saver.h"

#include "checkpoint/writer.h"

#include <chrono>
#include <utility>

namespace ndt::ckpt {

AsyncSaver::~AsyncSaver() {
  if (thread_.joinable()) thread_.join();
}

void AsyncSaver::wait() {
  if (!thread_.joinable()) return;
  thread_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  last_stats_ = pending_stats_;
}

void AsyncSaver::wait_for_previous() {
  const auto start = std::chrono::steady_clock::now();
  wait();
  const std::chrono::duration<double> blocked = std::chrono::steady_clock::now() - start;
  blocked_seconds_ += blocked.count();
}

void AsyncSaver::start(const std::filesystem::path& tmp_dir, int rank,
                       std::vector<TensorBlock> snapshot) {
  wait_for_previous();
  finished_.store(false, std::memory_order_release);
  snapshot_ = std::move(snapshot);
  thread_ = std::thread([this, tmp_dir, rank] {
    try {
      pending_stats_ = write_rank_file(tmp_dir, rank, snapshot_);
    } catch (...) {
      error_ = std::current_exception();
    }
    finished_.store(true, std::memory_order_release);
  });
}

std::vector<TensorBlock> AsyncSaver::take_snapshot() {
  wait();
  return std::move(snapshot_);
}

WriteStats AsyncSaver::save_now(const std::filesystem::path& tmp_dir, int rank,
                                const std::vector<TensorBlock>& blocks) {
  wait_for_previous();
  last_stats_ = write_rank_file(tmp_dir, rank, blocks);
  return last_stats_;
}

}  // namespace ndt::ckpt
