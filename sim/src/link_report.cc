#include "link_report.h"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "device.h"
#include "driver.h"

namespace memsim {

namespace {

// The driver is never destroyed (Driver::Get), so its devices outlive exit handlers.
void ReportLink() {
  Driver& driver = Driver::Get();
  for (int i = 0; i < driver.device_count(); ++i) {
    Device* dev = driver.device(i);
    std::fprintf(stderr, "memsim: device %d link: h2d %" PRIu64 " bytes, d2h %" PRIu64 " bytes\n",
                 i, dev->h2d().booked_bytes(), dev->d2h().booked_bytes());
  }
}

}  // namespace

void ReportLinkAtExitIfAsked() {
  const char* v = std::getenv("MEMSIM_LOG_LINK");
  if (v != nullptr && std::strcmp(v, "1") == 0) std::atexit(ReportLink);
}

}  // namespace memsim
