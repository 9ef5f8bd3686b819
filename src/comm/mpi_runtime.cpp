// MpiRuntime (see mpi_runtime.h): MPI_Init_thread / MPI_Finalize around a scope, with
// the world rank handed to the watchdog for its messages.
#include "comm/mpi_runtime.h"

#include "comm/watchdog.h"
#include "core/error.h"

#include <cstdlib>
#include <exception>

namespace ndt {

namespace {

int to_mpi(MpiThreadLevel level) {
  switch (level) {
    case MpiThreadLevel::single: return MPI_THREAD_SINGLE;
    case MpiThreadLevel::funneled: return MPI_THREAD_FUNNELED;
    case MpiThreadLevel::serialized: return MPI_THREAD_SERIALIZED;
    case MpiThreadLevel::multiple: return MPI_THREAD_MULTIPLE;
  }
  return MPI_THREAD_SINGLE;
}

MpiThreadLevel from_mpi(int level) {
  if (level >= MPI_THREAD_MULTIPLE) return MpiThreadLevel::multiple;
  if (level >= MPI_THREAD_SERIALIZED) return MpiThreadLevel::serialized;
  if (level >= MPI_THREAD_FUNNELED) return MpiThreadLevel::funneled;
  return MpiThreadLevel::single;
}

const char* level_name(MpiThreadLevel level) {
  switch (level) {
    case MpiThreadLevel::single: return "MPI_THREAD_SINGLE";
    case MpiThreadLevel::funneled: return "MPI_THREAD_FUNNELED";
    case MpiThreadLevel::serialized: return "MPI_THREAD_SERIALIZED";
    case MpiThreadLevel::multiple: return "MPI_THREAD_MULTIPLE";
  }
  return "?";
}

}  // namespace

MpiRuntime::MpiRuntime(MpiThreadLevel level, int* argc, char*** argv) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  NDT_CHECK(!finalized, "MPI was already finalised in this process and cannot be started again "
                        "(construct one MpiRuntime per process, for its whole life)");
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    MPI_Query_thread(&provided);
  } else {
    // Open MPI's non-blocking all-reduce (libnbc) uses a binomial tree whenever the group
    // has fewer than 4 ranks or the call is in place (ours always is): 2.5x slower than
    // its blocking all-reduce for 16-64 MiB on one node. Its ring is as fast as the
    // blocking call and sends the 2(n-1)/n volume we count. MCA parameters are read from
    // the environment at MPI_Init; a value the user set (--mca or the variable) wins.
    ::setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
    const int rc = MPI_Init_thread(argc, argv, to_mpi(level), &provided);
    NDT_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed with code {}", rc);
    owns_ = true;
  }
  provided_ = from_mpi(provided);
  NDT_CHECK(provided >= to_mpi(level), "MPI provides thread level {}, below the {} ndtrain needs",
            level_name(provided_), level_name(level));
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  set_comm_log_rank(world_rank_);
}

MpiRuntime::~MpiRuntime() {
  if (!owns_ || std::uncaught_exceptions() > 0) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace ndt
