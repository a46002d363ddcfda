// The server's connection accounting (launcher/serving/connection_table.h): the limits in all and
// per client address, and the deadlines that cut a connection (keep-alive, then the request),
// checked on real sockets (a socketpair's far end reads the cut as end of file).
#include "launcher/serving/connection_table.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

namespace sy::serving {
namespace {

using Clock = ConnectionTable::Clock;
using std::chrono::milliseconds;

// A connected pair: [0] is the server's socket, [1] the client's.
struct Pair {
  Pair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0); }
  ~Pair() {
    close(fd[0]);
    close(fd[1]);
  }
  // The client reads end of file: the server's side was shut down.
  bool ClientSeesEnd() const {
    char byte;
    return recv(fd[1], &byte, 1, MSG_DONTWAIT) == 0;
  }
  int fd[2] = {-1, -1};
};

TEST(ConnectionTableTest, LimitsInAllAndPerClientNameTheirFlags) {
  ConnectionTable table(ConnectionLimits{.max_connections = 3, .max_per_client = 2});
  Pair a, b, c, d;
  ConnectionTable::Entry* first = table.Open(a.fd[0], "10.0.0.1");
  ConnectionTable::Entry* second = table.Open(b.fd[0], "10.0.0.1");
  ConnectionTable::Entry* third = table.Open(c.fd[0], "10.0.0.1");
  EXPECT_EQ(table.OverLimit(first), "");
  EXPECT_EQ(table.OverLimit(second), "");
  EXPECT_NE(table.OverLimit(third).find("--max-connections-per-client"), std::string::npos);
  ConnectionTable::Entry* other = table.Open(d.fd[0], "10.0.0.2");
  EXPECT_NE(table.OverLimit(other).find("maximum of 3 connections open (--max-connections)"),
            std::string::npos);
  EXPECT_EQ(table.open(), 4);
  // Once connections close, new ones are within the limits again.
  table.Close(third);
  table.Close(other);
  table.Close(second);
  Pair e;
  ConnectionTable::Entry* again = table.Open(e.fd[0], "10.0.0.1");
  EXPECT_EQ(table.OverLimit(again), "");
  EXPECT_EQ(table.open(), 2);
  table.Close(first);
  table.Close(again);
  EXPECT_EQ(table.open(), 0);
}

TEST(ConnectionTableTest, DeadlinesCutIdleAndSlowConnectionsButNeverOneBeingAnswered) {
  ConnectionTable table(ConnectionLimits{.keep_alive_seconds = 1.0, .request_seconds = 2.0});
  const Clock::time_point t0 = Clock::now();
  Pair idle, slow, answered;
  ConnectionTable::Entry* idle_entry = table.Open(idle.fd[0], "c", t0);
  ConnectionTable::Entry* slow_entry = table.Open(slow.fd[0], "c", t0);
  ConnectionTable::Entry* answered_entry = table.Open(answered.fd[0], "c", t0);
  table.RequestBegan(slow_entry, t0 + milliseconds(500));
  table.RequestBegan(answered_entry, t0 + milliseconds(500));
  table.RequestReceived(answered_entry);

  EXPECT_EQ(table.CloseOverdue(t0 + milliseconds(900)), 0);
  EXPECT_FALSE(idle.ClientSeesEnd());
  // Past keep_alive_seconds with no request begun: cut.
  EXPECT_EQ(table.CloseOverdue(t0 + milliseconds(1100)), 1);
  EXPECT_TRUE(idle.ClientSeesEnd());
  EXPECT_FALSE(slow.ClientSeesEnd());
  // Past request_seconds from its request line, however often it sent a byte: cut.
  EXPECT_EQ(table.CloseOverdue(t0 + milliseconds(2600)), 1);
  EXPECT_TRUE(slow.ClientSeesEnd());
  // The request being answered has no deadline; once answered, its keep-alive one starts.
  EXPECT_EQ(table.CloseOverdue(t0 + milliseconds(60000)), 0);
  EXPECT_FALSE(answered.ClientSeesEnd());
  table.Answered(answered_entry, t0 + milliseconds(60000));
  EXPECT_EQ(table.CloseOverdue(t0 + milliseconds(60500)), 0);
  EXPECT_EQ(table.CloseOverdue(t0 + milliseconds(61100)), 1);
  EXPECT_TRUE(answered.ClientSeesEnd());
  // Each is cut once.
  EXPECT_EQ(table.CloseOverdue(t0 + milliseconds(99000)), 0);
  EXPECT_EQ(table.closed_overdue(), 3);
  table.Close(idle_entry);
  table.Close(slow_entry);
  table.Close(answered_entry);
}

TEST(ConnectionTableTest, PeerHasClosedSeesACloseButNotAPipelinedRequest) {
  Pair open, pipelined, closed;
  EXPECT_FALSE(PeerHasClosed(open.fd[0]));
  ASSERT_EQ(send(pipelined.fd[1], "GET", 3, 0), 3);
  EXPECT_FALSE(PeerHasClosed(pipelined.fd[0]));
  shutdown(closed.fd[1], SHUT_RDWR);
  EXPECT_TRUE(PeerHasClosed(closed.fd[0]));
  EXPECT_FALSE(PeerHasClosed(-1));
}

}  // namespace
}  // namespace sy::serving
