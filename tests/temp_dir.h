// TempDir: the one scratch directory of the tests. A fresh directory under the working directory
// (ctest runs in the build tree, on a real disk, so O_DIRECT works), removed with its contents on
// destruction.
//
// Ownership: owns the directory. Thread-safety: immutable after construction.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace sy::testing {

class TempDir {
 public:
  // `prefix` names the directory for people looking at a leftover: "<prefix>-XXXXXX".
  explicit TempDir(const std::string& prefix = "test") {
    std::string pattern = (std::filesystem::current_path() / (prefix + "-XXXXXX")).string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    char* made = ::mkdtemp(buffer.data());
    path_ = made != nullptr ? std::string(made) : std::string();
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  std::string operator/(const std::string& name) const { return File(name); }

 private:
  std::string path_;
};

}  // namespace sy::testing
