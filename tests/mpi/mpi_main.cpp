// main() of test_mpi, the tests that run under `mpirun -np N` (N = 2 and 4 in CTest).
// Starts MPI, gives the tests the world communicator (mpi_env.h), prints gtest's
// output on rank 0 only (other ranks print just their failures, prefixed with the
// rank), and makes every rank exit non-zero if any rank failed, rank 0 naming them.
//
// `test_mpi --hang-probe` (or `--hang-probe=async`) runs no tests: it makes rank 0
// enter an all_reduce (or wait on an iall_reduce) that the other ranks skip, for
// tests/launch/test_hang.cpp to check that the watchdog ends the job with a message
// naming the operation.
#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "comm/watchdog.h"
#include "mpi_env.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

std::unique_ptr<ndt::MpiCommunicator> g_world;

// Replaces gtest's printer on ranks other than 0: only failures, each with its rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

// Rank 0 enters an all_reduce on axis "dp" (1,000,000 f32 = 3.8 MiB) at step 12 with a
// 2 s timeout, blocking or as iall_reduce + Work::wait (`async`); the other ranks skip
// it and wait in a barrier on the world with a 20 s timeout, so rank 0's watchdog fires
// first and mpirun ends the others.
int hang_probe(bool async) {
  auto world = ndt::mpi_world();
  auto dp = world->split(0, world->rank(), "dp");
  ndt::set_comm_step(12);
  if (world->rank() == 0) {
    ndt::set_comm_timeout_seconds(2);
    std::vector<float> x(1000000, 1.0f);
    if (async) {
      dp->iall_reduce(x.data(), x.size(), ndt::DType::f32, ndt::ReduceOp::sum)->wait();
    } else {
      dp->all_reduce(x.data(), x.size(), ndt::DType::f32, ndt::ReduceOp::sum);
    }
  } else {
    ndt::set_comm_timeout_seconds(20);
    world->barrier();
  }
  std::fprintf(stderr, "hang probe: rank %d returned; the watchdog did not fire\n", world->rank());
  return 0;
}

}  // namespace

namespace ndt::testing {
Communicator& world() { return *g_world; }
}  // namespace ndt::testing

int main(int argc, char** argv) {
  ndt::MpiRuntime mpi(ndt::MpiThreadLevel::serialized, &argc, &argv);
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--hang-probe") == 0) return hang_probe(false);
    if (std::strcmp(argv[i], "--hang-probe=async") == 0) return hang_probe(true);
  }
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = mpi.world_rank(), size = mpi.world_size();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  // A test that breaks lockstep (a collective some ranks skip) ends the run in a
  // minute with the watchdog's message instead of hanging until CTest's timeout.
  ndt::set_comm_timeout_seconds(60);
  g_world = ndt::mpi_world();

  const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;

  std::vector<int> failed_by_rank(static_cast<size_t>(size));
  MPI_Allgather(&failed, 1, MPI_INT, failed_by_rank.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::string failing;
  for (int r = 0; r < size; ++r) {
    if (failed_by_rank[r]) failing += fmt::format("{}{}", failing.empty() ? "" : ", ", r);
  }
  if (rank == 0 && !failing.empty()) {
    std::fflush(stdout);
    std::fprintf(stderr, "test_mpi: tests failed on rank(s) %s of %d\n", failing.c_str(), size);
  }
  g_world.reset();  // before MPI_Finalize
  return failing.empty() ? 0 : 1;
}
