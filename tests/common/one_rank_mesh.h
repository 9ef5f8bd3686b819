// The one-rank mesh of a process, for tests that train on one rank (a reference run on
// every rank of an MPI test, or a unit test without MPI): every axis of size one over a
// SelfCommunicator (comm/self_communicator.h). One per process, shared by the tests.
#pragma once

#include "../common/one_rank_mesh.h"
#include "comm/device_mesh.h"

namespace ndt::testing {

inline DeviceMesh& one_rank_mesh() {
  static DeviceMesh mesh;
  return mesh;
}

}  // namespace ndt::testing
