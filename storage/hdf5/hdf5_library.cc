#include "storage/hdf5/hdf5_library.h"

namespace sy {

std::mutex& Hdf5Mutex() {
  static std::mutex* mutex = new std::mutex();
  return *mutex;
}

Hdf5Lock::Hdf5Lock() : lock_(Hdf5Mutex()) { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

bool ConfigureCheckpointFileAccess(hid_t file_access) {
  if (H5Pset_fclose_degree(file_access, H5F_CLOSE_STRONG) < 0) return false;
#if H5_VERSION_GE(1, 10, 7) && !(H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 12 && H5_VERS_RELEASE == 0)
  if (H5Pset_file_locking(file_access, /*use_file_locking=*/false,
                          /*ignore_when_disabled=*/true) < 0) {
    return false;
  }
#endif
  return true;
}

std::string Hdf5ErrorText() {
  struct Collected {
    std::string innermost;
    std::string outermost;
  } collected;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* error, void* data) -> herr_t {
        auto* c = static_cast<Collected*>(data);
        const std::string text = error->desc != nullptr ? error->desc : "";
        if (n == 0) c->innermost = text;
        c->outermost = text;
        return 0;
      },
      &collected);
  H5Eclear2(H5E_DEFAULT);
  if (collected.innermost.empty()) return "no HDF5 error detail";
  if (collected.outermost.empty() || collected.outermost == collected.innermost) {
    return collected.innermost;
  }
  return collected.outermost + ": " + collected.innermost;
}

}  // namespace sy
