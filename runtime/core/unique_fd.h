// UniqueFd: the owner of one POSIX file descriptor.
//
// Ownership: closes the descriptor on destruction or Reset(); move-only (copy is deleted).
// Thread-safety: none of its own; share the int from get() between threads, not the owner.
#pragma once

#include <unistd.h>

#include <utility>

namespace sy {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    // close() errors are not actionable here: durability comes from an earlier fsync, never close.
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace sy
