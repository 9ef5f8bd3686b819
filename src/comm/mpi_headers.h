// The one way ndtrain includes <mpi.h>: the C API only. Open MPI's mpi.h otherwise
// pulls in its deprecated C++ bindings in C++ files, whose symbols live in libmpi_cxx,
// which the build does not link (undefined MPI::Comm::Comm() and friends). Include
// this header (mpi_runtime.h and mpi_communicator.h do) before any direct <mpi.h>.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
