// parallel may include its own layer and runtime, storage and optim.
#pragma once

#include "optim/optimizer.h"
#include "parallel/communicator.h"
#include "runtime/core/status.h"
#include "storage/store/checksum.h"
