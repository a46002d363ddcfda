#include "launcher/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include "runtime/core/temporary_cleanup.h"

namespace sy::launcher {
namespace {

std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "read from a signal handler");

void Say(const char* text, size_t size) {
  // Nothing to do if stderr is gone; the flag is what matters.
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, text, size);
}

extern "C" void OnStopSignal(int signal) {
  int none = 0;
  if (!g_stop_signal.compare_exchange_strong(none, signal)) {
    // The second signal: the default action (termination by the signal), now, without the
    // temporaries of the save under way.
    RemoveTemporariesNow();
    ::signal(signal, SIG_DFL);
    ::raise(signal);
    return;
  }
  static constexpr char kTerm[] =
      "\nreceived SIGTERM: finishing this step and writing a checkpoint (send it again to stop at "
      "once)\n";
  static constexpr char kInt[] =
      "\nreceived SIGINT: finishing this step and writing a checkpoint (press Ctrl-C again to stop "
      "at once)\n";
  if (signal == SIGINT) {
    Say(kInt, sizeof(kInt) - 1);
  } else {
    Say(kTerm, sizeof(kTerm) - 1);
  }
}

}  // namespace

const std::atomic<int>& InstallStopSignalHandlers() {
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  // Restart interrupted system calls: the signal only sets a flag, and the I/O under way (a
  // checkpoint being written) should simply go on.
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
  return g_stop_signal;
}

}  // namespace sy::launcher
