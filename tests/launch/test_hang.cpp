// Launch-level tests of the communication layer, run from a plain (non-MPI) process:
// the watchdog ends a job whose ranks disagree on a collective (mpirun of the test_mpi
// binary's --hang-probe), within seconds and with a message naming the operation, the
// axis, the size and the step; test_mpi also runs as one process without mpirun
// (singleton MPI); and the timeout setting and message format, in-process.
#include "comm/communicator.h"
#include "comm/watchdog.h"
#include "core/error.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <thread>

namespace ndt {
namespace {

struct Outcome {
  int exit_code = -1;
  double seconds = 0;
  std::string output;  // stdout and stderr together
};

Outcome run(const std::string& command) {
  Outcome out;
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return out;
  char chunk[4096];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof chunk, pipe)) > 0) out.output.append(chunk, n);
  const int status = ::pclose(pipe);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return out;
}

std::string test_mpi() {
  const std::string path = std::string(NDT_BINARY_DIR) + "/test_mpi";
  return std::filesystem::exists(path) ? path : std::string();
}

// Two ranks, oversubscribed; `timeout` ends a job the watchdog failed to end (exit 124).
std::string mpirun2(const std::string& args) {
  return "timeout -k 5 45 " NDT_MPIRUN " -np 2 --oversubscribe --bind-to none --allow-run-as-root "
         "-x OMP_NUM_THREADS=1 " + args;
}

void expect_watchdog_ended_job(const Outcome& r) {
  EXPECT_EQ(r.exit_code, kCommTimeoutExitCode) << r.output;
  EXPECT_LT(r.seconds, 30.0) << r.output;
  EXPECT_NE(r.output.find("ndtrain: rank 0: all_reduce on mesh axis \"dp\" (3.8 MiB, f32) did not complete "
                          "within 2 s at step 12; aborting the job"),
            std::string::npos)
      << r.output;
  // Rank 1 (20 s timeout) was ended by mpirun, not by its own watchdog or by returning.
  EXPECT_EQ(r.output.find("ndtrain: rank 1:"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("did not fire"), std::string::npos) << r.output;
}

TEST(Watchdog, EndsAJobStuckInABlockingAllReduce) {
  const std::string bin = test_mpi();
  ASSERT_FALSE(bin.empty()) << "build test_mpi first (" NDT_BINARY_DIR "/test_mpi)";
  expect_watchdog_ended_job(run(mpirun2(bin + " --hang-probe")));
}

TEST(Watchdog, EndsAJobStuckInWorkWait) {
  const std::string bin = test_mpi();
  ASSERT_FALSE(bin.empty()) << "build test_mpi first (" NDT_BINARY_DIR "/test_mpi)";
  expect_watchdog_ended_job(run(mpirun2(bin + " --hang-probe=async")));
}

TEST(Watchdog, GuardHeldPastTheTimeoutEndsTheProcess) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        set_comm_log_rank(5);
        set_comm_step(7);
        set_comm_timeout_seconds(0.2);
        CommWaitGuard guard(CommOp::reduce_scatter, "dp_shard", 3 << 20, DType::bf16);
        std::this_thread::sleep_for(std::chrono::seconds(10));
      },
      ::testing::ExitedWithCode(kCommTimeoutExitCode),
      "ndtrain: rank 5: reduce_scatter on mesh axis \"dp_shard\" \\(3.0 MiB, bf16\\) did not complete within "
      "0.2 s at step 7; aborting the job");
}

TEST(Watchdog, GuardReleasedInTimeDoesNothing) {
  const double saved = comm_timeout_seconds();
  set_comm_timeout_seconds(0.1);
  for (int i = 0; i < 3; ++i) {
    CommWaitGuard guard(CommOp::all_reduce, "dp", 4, DType::f32);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // several watchdog rounds
  set_comm_timeout_seconds(saved);
  SUCCEED();  // still running
}

TEST(Singleton, TestMpiRunsAsOneProcessWithoutMpirun) {
  const std::string bin = test_mpi();
  ASSERT_FALSE(bin.empty()) << "build test_mpi first (" NDT_BINARY_DIR "/test_mpi)";
  const Outcome r = run("timeout -k 5 60 " + bin +
                        " --gtest_filter='Collectives.*:PointToPoint.*:Async.*:Split.*:Counters.*:Errors.*'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[  PASSED  ]"), std::string::npos) << r.output;
}

TEST(Timeout, SettingMustBePositiveAndFinite) {
  const double saved = comm_timeout_seconds();
  EXPECT_EQ(saved, 300.0);  // the default
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    try {
      set_comm_timeout_seconds(bad);
      ADD_FAILURE() << "accepted a timeout of " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("communication timeout"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(comm_timeout_seconds(), saved);
  set_comm_timeout_seconds(5);
  EXPECT_EQ(comm_timeout_seconds(), 5.0);
  set_comm_timeout_seconds(saved);
}

TEST(Timeout, MessageNamesOperationAxisSizeDtypeAndStep) {
  EXPECT_EQ(comm_timeout_message(1, CommOp::all_reduce, "dp", 25 << 20, DType::f32, 5, 12),
            "ndtrain: rank 1: all_reduce on mesh axis \"dp\" (25.0 MiB, f32) did not complete within 5 s at "
            "step 12; aborting the job");
  EXPECT_EQ(comm_timeout_message(0, CommOp::barrier, "world", 0, DType::f32, 2.5, -1),
            "ndtrain: rank 0: barrier on mesh axis \"world\" did not complete within 2.5 s; aborting the job");
  EXPECT_EQ(format_bytes(12), "12 B");
  EXPECT_EQ(format_bytes(4000), "3.9 KiB");
  EXPECT_EQ(format_bytes(int64_t{3} << 30), "3.0 GiB");
}

}  // namespace
}  // namespace ndt
