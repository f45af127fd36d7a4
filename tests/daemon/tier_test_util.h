// Raw tier-socket clients for tests (Note [tier channel] in memvirt/tier_protocol.h); connect
// with tier::ConnectUnixSocket.
#ifndef MEMVIRT_TESTS_DAEMON_TIER_TEST_UTIL_H_
#define MEMVIRT_TESTS_DAEMON_TIER_TEST_UTIL_H_

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "memvirt/tier_protocol.h"

namespace memvirt::testing {

// Sends a Hello for `slots` staging slots with `memfd` attached and reads the reply. False if
// either did not go through whole. The caller keeps `memfd`.
inline bool SendHelloWith(int fd, uint32_t slots, int memfd, tier::HelloReply* reply) {
  tier::Hello hello;
  hello.staging_slots = slots;
  return tier::SendHello(fd, hello, memfd) &&
         recv(fd, reply, sizeof(*reply), MSG_WAITALL) == static_cast<ssize_t>(sizeof(*reply));
}

// Sends a Hello for `slots` staging slots with a fresh sealed memfd of that size and reads the
// reply. False if either did not go through whole.
inline bool SendHello(int fd, uint32_t slots, tier::HelloReply* reply) {
  const int memfd = tier::CreateStagingMemfd(slots);
  if (memfd < 0) return false;
  const bool ok = SendHelloWith(fd, slots, memfd, reply);
  close(memfd);
  return ok;
}

// Appends everything the peer sends until it closes (or an error) to `*answer`, continuing after
// interrupted reads: a signal (libFuzzer's periodic SIGALRM has no SA_RESTART) must not end the
// answer early. Returns false on an error other than EOF.
inline bool ReceiveUntilClosed(int fd, std::string* answer) {
  char buf[4096];
  while (true) {
    const ssize_t got = recv(fd, buf, sizeof(buf), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return false;
    if (got == 0) return true;
    answer->append(buf, static_cast<size_t>(got));
  }
}

}  // namespace memvirt::testing

#endif  // MEMVIRT_TESTS_DAEMON_TIER_TEST_UTIL_H_
