#include "launcher/serving/connection_table.h"

#include <sys/socket.h>

#include <cerrno>

namespace sy::serving {
namespace {

ConnectionTable::Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<ConnectionTable::Clock::duration>(
      std::chrono::duration<double>(s));
}

}  // namespace

struct ConnectionTable::Entry {
  int fd = -1;
  std::string client;
  std::string over_limit;  // why this connection is past a limit, fixed when it opened
  bool has_deadline = true;
  bool shut_down = false;
  Clock::time_point deadline;
};

ConnectionTable::ConnectionTable(ConnectionLimits limits) : limits_(limits) {}

ConnectionTable::~ConnectionTable() {
  MutexLock lock(&mu_);
  for (Entry* e : entries_) delete e;
}

ConnectionTable::Entry* ConnectionTable::Open(int fd, const std::string& client,
                                              Clock::time_point now) {
  auto entry = std::make_unique<Entry>();
  entry->fd = fd;
  entry->client = client;
  entry->deadline = now + Seconds(limits_.keep_alive_seconds);
  MutexLock lock(&mu_);
  const int from_client = ++per_client_[client];
  if (static_cast<int>(entries_.size()) >= limits_.max_connections) {
    entry->over_limit = "the server has its maximum of " + std::to_string(limits_.max_connections) +
                        " connections open (--max-connections); retry later";
  } else if (from_client > limits_.max_per_client) {
    entry->over_limit = "this client address has the maximum of " +
                        std::to_string(limits_.max_per_client) +
                        " connections open (--max-connections-per-client); reuse a connection "
                        "or retry later";
  }
  return *entries_.insert(entry.release()).first;
}

void ConnectionTable::Close(Entry* entry) {
  MutexLock lock(&mu_);
  if (entries_.erase(entry) == 0) return;
  auto it = per_client_.find(entry->client);
  if (it != per_client_.end() && --it->second == 0) per_client_.erase(it);
  delete entry;
}

void ConnectionTable::RequestBegan(Entry* entry, Clock::time_point now) {
  MutexLock lock(&mu_);
  entry->has_deadline = true;
  entry->deadline = now + Seconds(limits_.request_seconds);
}

void ConnectionTable::RequestReceived(Entry* entry) {
  MutexLock lock(&mu_);
  entry->has_deadline = false;
}

void ConnectionTable::Answered(Entry* entry, Clock::time_point now) {
  MutexLock lock(&mu_);
  entry->has_deadline = true;
  entry->deadline = now + Seconds(limits_.keep_alive_seconds);
}

std::string ConnectionTable::OverLimit(const Entry* entry) const {
  MutexLock lock(&mu_);
  return entry->over_limit;
}

int ConnectionTable::CloseOverdue(Clock::time_point now) {
  MutexLock lock(&mu_);
  int count = 0;
  for (Entry* e : entries_) {
    if (!e->has_deadline || e->shut_down || now < e->deadline) continue;
    // The descriptor is still the HTTP layer's (Close comes before it closes it): shut down,
    // never closed, here.
    ::shutdown(e->fd, SHUT_RDWR);
    e->shut_down = true;
    ++count;
  }
  closed_overdue_ += count;
  return count;
}

int ConnectionTable::open() const {
  MutexLock lock(&mu_);
  return static_cast<int>(entries_.size());
}

int64_t ConnectionTable::closed_overdue() const {
  MutexLock lock(&mu_);
  return closed_overdue_;
}

bool PeerHasClosed(int fd) {
  if (fd < 0) return false;
  char byte;
  const ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // a pipelined next request: still there
  if (n == 0) return true;  // closed
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace sy::serving
