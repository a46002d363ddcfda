#include "runtime/core/temporary_cleanup.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <utility>

#include <spdlog/spdlog.h>

namespace sy {
namespace {

enum SlotState : int { kFree = 0, kFilling = 1, kLive = 2 };

struct Slot {
  std::atomic<int> state{kFree};
  char path[PATH_MAX] = {};
};
static_assert(std::atomic<int>::is_always_lock_free, "read from a signal handler");

constexpr int kSlots = 64;
std::array<Slot, kSlots> g_slots;

// The entries of a directory as getdents64 returns them (the glibc struct is not guaranteed to
// match the raw system call's, so this one is spelled out).
struct LinuxDirent64 {
  ino64_t d_ino;
  off64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

bool IsDotOrDotDot(const char* name) {
  return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

// Removes `name` in `dir_fd`: a file, or a directory with everything in it (to `depth` levels).
// Only async-signal-safe calls. Passes over a directory repeat until it is empty, since entries
// removed while it is read may make the listing skip others, and another thread may still be
// adding files.
void RemoveAt(int dir_fd, const char* name, int depth) {
  if (::unlinkat(dir_fd, name, 0) == 0 || (errno != EISDIR && errno != EPERM)) return;
  if (depth <= 0) return;
  const int fd = ::openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  alignas(8) char buffer[4096];
  for (int pass = 0; pass < 16; ++pass) {
    bool found = false;
    ::lseek(fd, 0, SEEK_SET);
    for (;;) {
      const long n = ::syscall(SYS_getdents64, fd, buffer, sizeof(buffer));
      if (n <= 0) break;
      for (long at = 0; at < n;) {
        const auto* entry = reinterpret_cast<const LinuxDirent64*>(buffer + at);
        at += entry->d_reclen;
        if (IsDotOrDotDot(entry->d_name)) continue;
        found = true;
        RemoveAt(fd, entry->d_name, depth - 1);
      }
    }
    if (!found) break;
  }
  ::close(fd);
  ::unlinkat(dir_fd, name, AT_REMOVEDIR);
}

// The thread that installed the handlers (main's), where they do their work.
std::atomic<pid_t> g_main_thread{0};
static_assert(std::atomic<pid_t>::is_always_lock_free, "read from a signal handler");

extern "C" void RemoveTemporariesAndDie(int signal) {
  // A signal sent to the process may land on any thread, and the main thread, which creates the
  // temporaries, would go on meanwhile: it could create one just after the removal below and
  // before the process dies. So the work is done on the main thread, which cannot be creating
  // anything while it runs the handler: another thread passes the signal on to it.
  const pid_t main_thread = g_main_thread.load();
  if (main_thread != 0 && ::gettid() != main_thread) {
    ::syscall(SYS_tgkill, ::getpid(), main_thread, signal);
    return;
  }
  RemoveTemporariesNow();
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

}  // namespace

void RemoveTemporariesNow() {
  for (Slot& slot : g_slots) {
    if (slot.state.load(std::memory_order_acquire) != kLive) continue;
    RemoveAt(AT_FDCWD, slot.path, 8);
  }
}

void InstallTemporaryCleanupOnSignals() {
  g_main_thread = ::gettid();
  struct sigaction action = {};
  action.sa_handler = RemoveTemporariesAndDie;
  sigemptyset(&action.sa_mask);
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) {
    // A signal the parent set to be ignored (nohup's SIGHUP, a background job's SIGINT) stays
    // ignored: the process must go on living through it, as it would without these handlers.
    struct sigaction old = {};
    if (::sigaction(signal, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(signal, &action, nullptr);
  }
}

ScopedTemporary::ScopedTemporary(std::string path) : path_(std::move(path)) {
  if (path_.size() >= PATH_MAX) {
    spdlog::warn("{}: the path is too long to be removed if a signal ends the process", path_);
    return;
  }
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kFilling)) continue;
    std::memcpy(g_slots[i].path, path_.c_str(), path_.size() + 1);
    g_slots[i].state.store(kLive, std::memory_order_release);
    slot_ = i;
    return;
  }
  spdlog::warn(
      "{}: more than {} temporaries at once; this one is not removed if a signal ends "
      "the process",
      path_, kSlots);
}

ScopedTemporary::~ScopedTemporary() { Remove(); }

ScopedTemporary::ScopedTemporary(ScopedTemporary&& other) noexcept
    : path_(std::exchange(other.path_, {})), slot_(std::exchange(other.slot_, -1)) {}

ScopedTemporary& ScopedTemporary::operator=(ScopedTemporary&& other) noexcept {
  if (this != &other) {
    Remove();
    path_ = std::exchange(other.path_, {});
    slot_ = std::exchange(other.slot_, -1);
  }
  return *this;
}

void ScopedTemporary::Unregister() {
  if (slot_ >= 0) g_slots[slot_].state.store(kFree, std::memory_order_release);
  slot_ = -1;
}

void ScopedTemporary::Release() {
  Unregister();
  path_.clear();
}

void ScopedTemporary::Remove() {
  // Unregistered first: the handler must not race the removal below into a path reused later.
  Unregister();
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  if (ec) spdlog::warn("cannot remove the temporary {}: {}", path_, ec.message());
  path_.clear();
}

}  // namespace sy
