// ConnectionTable: what each of the server's connections may cost, and the clock it runs on.
//
// Every accepted connection is entered here (Open) and left (Close) by the HTTP layer. The table
// counts connections in all and per client address, so that the first request of a connection
// past either limit is answered 503 and the connection closed (OverLimit). It gives each
// connection a deadline for what it is waiting for:
//   - after it is accepted, or after its previous answer went out: keep_alive_seconds for the next
//     request to begin (its request line in). A client that trickles its request line or idles
//     on a keep-alive connection is cut there.
//   - once a request has begun: request_seconds for the whole request (every header, the body) to
//     arrive. A client that trickles its headers or its body one byte at a time (slowloris) is cut
//     there, however often it sends.
//   - while its request is answered: none (the answer's own writes are bounded by the HTTP
//     layer's inactivity timeout; a client that leaves is noticed by PeerHasClosed).
// CloseOverdue, called every few hundred milliseconds, shuts down (both ways) the socket of every
// connection past its deadline; the HTTP layer then sees the connection fail and closes it. The
// socket is shut down, never closed, here: the descriptor stays the HTTP layer's until it calls
// Close, which it does before closing the descriptor, so a number reused by another file is
// never touched.
//
// Ownership: the table owns its entries; an Entry pointer is valid from Open to Close.
// Thread-safety: every member may be called from any thread (one mutex).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "runtime/core/mutex.h"

namespace sy::serving {

struct ConnectionLimits {
  int max_connections = 1024;  // in all; the first request past it gets 503
  int max_per_client = 256;    // from one client address; the same
  double keep_alive_seconds = 10;
  double request_seconds = 30;
};

class ConnectionTable {
 public:
  using Clock = std::chrono::steady_clock;
  struct Entry;

  explicit ConnectionTable(ConnectionLimits limits);
  ~ConnectionTable();
  ConnectionTable(const ConnectionTable&) = delete;
  ConnectionTable& operator=(const ConnectionTable&) = delete;

  // A connection accepted on socket `fd` from `client` (its address, without the port). Its
  // keep-alive deadline starts now.
  Entry* Open(int fd, const std::string& client, Clock::time_point now = Clock::now())
      SY_EXCLUDES(mu_);
  // The connection is closing: call before its descriptor is closed.
  void Close(Entry* entry) SY_EXCLUDES(mu_);

  // A request's line is in: request_seconds from now for the rest of it.
  void RequestBegan(Entry* entry, Clock::time_point now = Clock::now()) SY_EXCLUDES(mu_);
  // The whole request is in: no deadline while it is answered.
  void RequestReceived(Entry* entry) SY_EXCLUDES(mu_);
  // Its answer went out: keep_alive_seconds from now for the next request.
  void Answered(Entry* entry, Clock::time_point now = Clock::now()) SY_EXCLUDES(mu_);

  // Empty if the connection is within the limits; else why not (for its 503).
  std::string OverLimit(const Entry* entry) const SY_EXCLUDES(mu_);

  // Shuts down every connection past its deadline; returns how many. Each is shut down once.
  int CloseOverdue(Clock::time_point now = Clock::now()) SY_EXCLUDES(mu_);

  int open() const SY_EXCLUDES(mu_);
  // Connections cut by CloseOverdue since the start.
  int64_t closed_overdue() const SY_EXCLUDES(mu_);
  const ConnectionLimits& limits() const { return limits_; }

 private:
  const ConnectionLimits limits_;
  mutable Mutex mu_;
  std::set<Entry*> entries_ SY_GUARDED_BY(mu_);
  std::map<std::string, int> per_client_ SY_GUARDED_BY(mu_);
  int64_t closed_overdue_ SY_GUARDED_BY(mu_) = 0;
};

// True once the peer of connected socket `fd` has closed or reset it (a FIN reads as 0 bytes).
// Never blocks; a pipelined next request reads as still there. A client that only shut down its
// sending side reads as gone too: HTTP clients keep both sides open while they wait for an answer.
bool PeerHasClosed(int fd);

}  // namespace sy::serving
