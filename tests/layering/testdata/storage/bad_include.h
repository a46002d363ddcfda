// storage may not include parallel (a layer to its right). The unbalanced [ on this line is list
// syntax to CMake; the check must still see the lines after it.
#pragma once

#include "parallel/communicator.h"
#include "runtime/core/status.h"
