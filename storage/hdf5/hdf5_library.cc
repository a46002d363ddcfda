#include "storage/hdf5/hdf5_library.h"

#include <cstdio>
#include <cstdlib>

#include "storage/hdf5/hdf5_error_detail.h"

namespace sy {
namespace {

// No HDF5 clean-up at exit. HDF5 up to 1.14.0 frees a file whose H5Fclose fails (its final flush
// cannot be written: a full disk, a file size limit) but leaves its id registered; the clean-up
// HDF5 registers with atexit() then closes that id again and dies on the freed memory (SIGSEGV
// after a failed checkpoint save; HDFGroup/hdf5#2257, fixed by #2291 in 1.14.1). Every checkpoint
// file is closed explicitly, so the clean-up has nothing of ours to do. H5dont_atexit only takes
// effect before HDF5 is first used, hence a static initialiser of this file, which every use of
// HDF5 in Switchyard links.
[[maybe_unused]] const bool kNoAtExitCleanup = H5dont_atexit() >= 0;

// HDF5's file drivers describe a failed call by every argument ("file write failed: time = Mon
// Nov 2 ..., filename = '...', file descriptor = 3, errno = 27, error message = 'File too large',
// buf = 0x..., total write size = 2048, ...", with a newline in the time). For people: what
// failed and the reason, "file write failed: File too large (errno 27)".
std::string ConciseDescription(const std::string& desc) {
  std::string out = desc;
  const size_t details = desc.find(": time = ");
  if (details != std::string::npos) {
    out = desc.substr(0, details);
    const std::string message_key = "error message = '";
    const size_t message = desc.find(message_key, details);
    if (message != std::string::npos) {
      const size_t start = message + message_key.size();
      const size_t end = desc.find('\'', start);
      out += ": " + desc.substr(start, end == std::string::npos ? end : end - start);
      const size_t errno_at = desc.find("errno = ", details);
      if (errno_at != std::string::npos) {
        const long value = std::strtol(desc.c_str() + errno_at + 8, nullptr, 10);
        out += " (errno " + std::to_string(value) + ")";
      }
    }
  }
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

// HDF5's whole error stack as H5Eprint2 writes it.
std::string ErrorStackDump() {
  char* text = nullptr;
  size_t size = 0;
  std::FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) return "";
  H5Eprint2(H5E_DEFAULT, stream);
  std::fclose(stream);
  std::string dump(text, size);
  std::free(text);
  return dump;
}

}  // namespace

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
  const std::string dump = Hdf5VerboseErrors() ? ErrorStackDump() : "";
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* error, void* data) -> herr_t {
        auto* c = static_cast<Collected*>(data);
        const std::string text = error->desc != nullptr ? ConciseDescription(error->desc) : "";
        if (n == 0) c->innermost = text;
        c->outermost = text;
        return 0;
      },
      &collected);
  H5Eclear2(H5E_DEFAULT);
  std::string text;
  if (collected.innermost.empty()) {
    text = "no HDF5 error detail";
  } else if (collected.outermost.empty() || collected.outermost == collected.innermost) {
    text = collected.innermost;
  } else {
    text = collected.outermost + ": " + collected.innermost;
  }
  if (!dump.empty()) text += "\nHDF5 error stack:\n" + dump;
  return text;
}

}  // namespace sy
