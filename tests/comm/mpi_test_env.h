// The environment of the comm tests that run under mpirun: the world communicator, made by
// mpi_test_main.cc.
#pragma once

#include "comm/distributed.h"
#include "comm/mpi_comm.h"
#include "tensor_values.h"

namespace quill::test {

MpiComm& mpi_world();
Distributed& mpi_distributed();

}  // namespace quill::test
