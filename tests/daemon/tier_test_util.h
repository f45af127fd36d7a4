// Raw tier-socket clients for tests (Note [tier channel] in memvirt/tier_protocol.h); connect
// with tier::ConnectUnixSocket.
#ifndef MEMVIRT_TESTS_DAEMON_TIER_TEST_UTIL_H_
#define MEMVIRT_TESTS_DAEMON_TIER_TEST_UTIL_H_

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

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

}  // namespace memvirt::testing

#endif  // MEMVIRT_TESTS_DAEMON_TIER_TEST_UTIL_H_
