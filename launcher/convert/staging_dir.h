// StagingDir: the directory a conversion writes into before renaming it to its final name (an
// hf output, a sharded native one), removed with all it holds unless Release()d, so a failed
// conversion leaves nothing behind (launcher/convert/convert.h).
//
// Ownership: owns the directory on disk until Release. Thread-safety: one thread.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

namespace sy::convert {

class StagingDir {
 public:
  explicit StagingDir(std::string path) : path_(std::move(path)) {}
  ~StagingDir() {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;
  // The directory now stands under its final name: nothing to remove.
  void Release() { path_.clear(); }

 private:
  std::string path_;
};

}  // namespace sy::convert
