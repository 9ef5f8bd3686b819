// The MPI test environment of the test_mpi binary (tests/mpi/mpi_main.cpp): MPI is
// initialised before any test runs, and every test reaches the world through world().
// Every rank runs every test in the same order, so a test may use collectives freely;
// a test must not return early on some ranks only (its peers would wait, and the
// communication timeout set in mpi_main.cpp would end the run).
#pragma once

#include "comm/communicator.h"

namespace ndt::testing {

// The world communicator (axis "world"), shared by all tests. Its counters accumulate
// across tests: a test that checks counters should reset them (world().stats() = {})
// or use its own communicator from world().split(...).
Communicator& world();

}  // namespace ndt::testing
