// The MPI environment of an MPI test binary (tests/parallel/mpi_test_main.cc creates it once
// before any test runs). Tests take the world communicator from here.
#pragma once

#include "parallel/mpi_environment.h"

namespace sy::testing {

MpiEnvironment& TestMpi();

}  // namespace sy::testing
