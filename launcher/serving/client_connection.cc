#include "launcher/serving/client_connection.h"

#include <dirent.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace sy::serving {
namespace {

// The numeric host and port of a socket address, as httplib writes them (getnameinfo with
// NI_NUMERICHOST).
bool Numeric(const sockaddr_storage& addr, socklen_t len, std::string* host, int* port) {
  char h[NI_MAXHOST], s[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, h, sizeof h, s, sizeof s,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  *host = h;
  *port = std::atoi(s);
  return true;
}

// Calls `visit(fd, self_host, self_port, peer_host, peer_port)` for every connected socket of
// this process until it returns true; returns that socket, or -1.
template <typename Visit>
int FindSocket(Visit visit) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, self{};
    socklen_t peer_len = sizeof peer, self_len = sizeof self;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0 ||
        getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&self), &self_len) != 0) {
      continue;
    }
    std::string peer_host, self_host;
    int peer_port = -1, self_port = -1;
    if (Numeric(peer, peer_len, &peer_host, &peer_port) &&
        Numeric(self, self_len, &self_host, &self_port) &&
        visit(static_cast<int>(fd), self_host, self_port, peer_host, peer_port)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

}  // namespace

ClientConnection ClientConnection::Find(const std::string& local_addr, int local_port,
                                        const std::string& remote_addr, int remote_port) {
  return ClientConnection(FindSocket([&](int, const std::string& self_host, int self_port,
                                         const std::string& peer_host, int peer_port) {
    return peer_host == remote_addr && peer_port == remote_port && self_host == local_addr &&
           self_port == local_port;
  }));
}

int ClientConnection::ShutdownAll(int local_port) {
  int count = 0;
  FindSocket([&](int fd, const std::string&, int self_port, const std::string&, int) {
    if (self_port == local_port && shutdown(fd, SHUT_RDWR) == 0) ++count;
    return false;  // every one
  });
  return count;
}

bool ClientConnection::Gone() const {
  if (fd_ < 0) return false;
  char byte;
  const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // a pipelined next request: still there
  if (n == 0) return true;  // closed
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace sy::serving
