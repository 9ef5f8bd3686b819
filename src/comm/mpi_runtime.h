// MpiRuntime: MPI's lifetime as an object. Construct one near the top of main (or of
// a command) and every communicator is usable while it lives. It initialises MPI
// unless something else already did, and finalises only what it initialised, so it
// is safe under mpirun, in a singleton process started without mpirun, and nested
// inside code that already holds one.
//
// Thread level: MPI_THREAD_SERIALIZED by default. Any thread may call MPI, one at a
// time: the compute loop polls Work::test() from the main thread, and a progress
// thread may drive outstanding Works while the main thread computes without calling
// MPI (`ndtrain bench overlap` measures both). The watchdog thread never calls MPI.
// MPI_THREAD_MULTIPLE (concurrent calls) costs a lock in every MPI call and is only
// taken when asked for.
//
// Tuning: when it initialises MPI, it selects libnbc's ring algorithm for MPI_Iallreduce
// (OMPI_MCA_coll_libnbc_iallreduce_algorithm=1, unless already set): Open MPI's default
// for in-place calls and groups under 4 ranks is a binomial tree, 2.5x slower here.
#pragma once

#include "comm/mpi_headers.h"  // so that a later <mpi.h> in the includer is the C API only

namespace ndt {

enum class MpiThreadLevel { single, funneled, serialized, multiple };

class MpiRuntime {
 public:
  // argc/argv may be null (MPI-3 allows it). Throws ndt::Error if MPI was already
  // finalised (it cannot be initialised twice in a process) or cannot give `level`.
  explicit MpiRuntime(MpiThreadLevel level = MpiThreadLevel::serialized, int* argc = nullptr,
                      char*** argv = nullptr);
  // Finalises MPI if this object initialised it, except while an exception unwinds:
  // then MPI is left alone, so the process exits without blocking in MPI_Finalize on
  // ranks that may never get there, and mpirun ends the job.
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // Whether this object called MPI_Init_thread (and will call MPI_Finalize).
  bool owns_mpi() const { return owns_; }
  // The thread level MPI provides (may exceed the one asked for).
  MpiThreadLevel thread_level() const { return provided_; }

 private:
  bool owns_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
  MpiThreadLevel provided_ = MpiThreadLevel::single;
};

}  // namespace ndt
