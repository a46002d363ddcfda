#include "launcher/version.h"

#include "runtime/backend/backend.h"
#include "runtime/core/build_info.h"

namespace sy::launcher {
namespace {
const char* OnOff(int flag) { return flag ? "on" : "off"; }
}  // namespace

std::string VersionText() {
  std::string text = std::string("switchyard ") + SY_VERSION + "\n";
  text += std::string("features: cuda=") + OnOff(SY_HAVE_CUDA) + " nccl=" + OnOff(SY_HAVE_NCCL) +
          " io_uring=" + OnOff(SY_HAVE_IO_URING) + " pmem=" + OnOff(SY_HAVE_PMEM) +
          " hdf5=" + OnOff(SY_HAVE_HDF5) + " mpi=" + OnOff(SY_HAVE_MPI) + "\n";
  text += "devices:";
  for (const Device& d : AvailableDevices()) text += " " + d.ToString();
  return text + "\n";
}

}  // namespace sy::launcher
