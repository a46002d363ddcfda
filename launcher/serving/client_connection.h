// ClientConnection: whether the client of a request still holds its connection, for an answer
// that goes out only at the end (a non-streamed completion), where no write would notice that it
// left. cpp-httplib 0.11 (Debian 12) does not hand a handler its socket, so the socket is found
// among this process's descriptors by the two addresses the request carries (local and remote,
// unique to one TCP connection), once per request.
//
// A peer that closed (FIN: recv peeks 0 bytes) or reset the connection is gone. A client that
// only shut down its sending side after the request would also read as gone; HTTP clients keep
// both sides open while they wait for an answer.
//
// Ownership: refers to httplib's socket without owning it; valid while the handler runs (httplib
// closes the socket after the handler returns). Thread-safety: the handler's thread.
#pragma once

#include <string>

namespace sy::serving {

class ClientConnection {
 public:
  // The socket connected from local_addr:local_port to remote_addr:remote_port (the numeric
  // forms httplib puts in its Request); when none is found, Gone() is always false.
  static ClientConnection Find(const std::string& local_addr, int local_port,
                               const std::string& remote_addr, int remote_port);

  // Shuts down (both ways) every accepted connection of this process on `local_port`, whoever
  // holds it: a client trickling its headers, an idle keep-alive one, one mid-answer. Their
  // threads' reads and writes then fail at once. Returns how many were shut down.
  static int ShutdownAll(int local_port);

  bool found() const { return fd_ >= 0; }
  // True once the client has closed or reset the connection. Never blocks.
  bool Gone() const;

 private:
  explicit ClientConnection(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace sy::serving
