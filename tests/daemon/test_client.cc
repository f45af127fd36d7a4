// memvirt-test-client: a stand-in for the shim in integration tests. It registers through the
// client library, keeps "pages" resident within the budget the daemon grants, pages them to a
// host copy and back when told to shrink, acknowledges directives, and prints a checksum of
// the final page contents so the test can verify data integrity end to end.
//
// Output lines (stdout, flushed): "registered pid=P", "state NAME", "budget BYTES",
// "done checksum=HEX iterations=N registrations=R".
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "memvirt/client.h"
#include "tests/daemon/page_pattern.h"

namespace {

using memvirt::client::Directive;

struct Args {
  std::string socket;
  std::string gpu = "GPU-00000000-0000-0000-0000-00000000aaaa";
  uint64_t device_bytes = 1ull << 30;
  uint64_t demand_bytes = 0;
  uint64_t page_bytes = 1ull << 20;  // accounting size of one page
  int pages = 256;
  int iterations = 200;
  int iteration_ms = 5;
  int wait_connected_ms = 5000;
  bool ignore_directives = false;
  bool fork_holder = false;  // fork a child that keeps the daemon connection open
};

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    const size_t eq = s.find('=');
    if (s.rfind("--", 0) != 0 ||
        (eq == std::string::npos && s != "--ignore-directives" && s != "--fork-holder")) {
      std::fprintf(stderr, "bad argument %s\n", argv[i]);
      return false;
    }
    const std::string k = s.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const std::string v = eq == std::string::npos ? "" : s.substr(eq + 1);
    if (k == "socket")
      a->socket = v;
    else if (k == "gpu")
      a->gpu = v;
    else if (k == "device-bytes")
      a->device_bytes = std::stoull(v);
    else if (k == "demand-bytes")
      a->demand_bytes = std::stoull(v);
    else if (k == "page-bytes")
      a->page_bytes = std::stoull(v);
    else if (k == "pages")
      a->pages = std::stoi(v);
    else if (k == "iterations")
      a->iterations = std::stoi(v);
    else if (k == "iteration-ms")
      a->iteration_ms = std::stoi(v);
    else if (k == "wait-connected-ms")
      a->wait_connected_ms = std::stoi(v);
    else if (k == "ignore-directives")
      a->ignore_directives = true;
    else if (k == "fork-holder")
      a->fork_holder = true;
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return false;
    }
  }
  return true;
}

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// Pages live either "on the device" (device_) or in the host tier (host_); only device pages
// count against the budget. Contents move with the page, so a lost or corrupted copy shows up
// in the final checksum.
class PageStore {
 public:
  PageStore(int pages, uint64_t page_bytes)
      : page_bytes_(page_bytes), device_(pages), host_(pages) {}

  uint64_t resident_bytes() const { return resident_pages_ * page_bytes_; }
  uint64_t host_bytes() const { return host_pages_ * page_bytes_; }

  void EvictDownTo(uint64_t budget) {
    while (resident_bytes() > budget && !lru_.empty()) {
      const int p = lru_.front();
      lru_.pop_front();
      host_[p] = std::move(device_[p]);
      device_[p].clear();
      --resident_pages_;
      ++host_pages_;
      paged_out_ += page_bytes_;
    }
  }

  // Makes page p resident (within `budget`) and returns its contents.
  std::vector<uint8_t>& Touch(int p, uint64_t budget) {
    if (device_[p].empty()) {
      EvictDownTo(budget >= page_bytes_ ? budget - page_bytes_ : 0);
      if (!host_[p].empty()) {
        device_[p] = std::move(host_[p]);
        host_[p].clear();
        --host_pages_;
        paged_in_ += page_bytes_;
      } else {
        device_[p].assign(memvirt::testing::kPageDataBytes, 0);
      }
      ++resident_pages_;
    } else {
      lru_.erase(std::find(lru_.begin(), lru_.end(), p));
    }
    lru_.push_back(p);
    return device_[p];
  }

  const std::vector<uint8_t>& Contents(int p) const {
    return device_[p].empty() ? host_[p] : device_[p];
  }

  memvirt::client::GpuUsage Usage(const std::string& gpu) const {
    memvirt::client::GpuUsage u;
    u.gpu_uuid = gpu;
    u.resident_bytes = resident_bytes();
    u.host_bytes = host_bytes();
    u.paged_in_bytes = paged_in_;
    u.paged_out_bytes = paged_out_;
    return u;
  }

 private:
  const uint64_t page_bytes_;
  std::vector<std::vector<uint8_t>> device_;
  std::vector<std::vector<uint8_t>> host_;
  std::deque<int> lru_;
  uint64_t resident_pages_ = 0;
  uint64_t host_pages_ = 0;
  uint64_t paged_in_ = 0;
  uint64_t paged_out_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) return 2;

  std::mutex mu;
  std::deque<Directive> pending;
  memvirt::client::Options o;
  o.socket_path = args.socket;
  o.gpus.push_back({args.gpu, args.device_bytes, args.demand_bytes, 0});
  o.process_name = "memvirt-test-cl";
  o.on_directive = [&](const Directive& d) {
    std::lock_guard<std::mutex> lock(mu);
    pending.push_back(d);
  };
  o.on_state = [](memvirt::client::State s) {
    Say(std::string("state ") + memvirt::client::StateName(s));
  };
  std::unique_ptr<memvirt::client::Client> client = memvirt::client::Client::Start(o);
  if (client->WaitConnected(std::chrono::milliseconds(args.wait_connected_ms))) {
    Say("registered pid=" + std::to_string(client->daemon_pid()) +
        " self=" + std::to_string(getpid()));
  }

  if (args.fork_holder) {
    // The child inherits the connected socket and never closes it: only the daemon's pidfd
    // watch can tell that this (registered) process died.
    const pid_t child = fork();
    if (child == 0) {
      for (;;) pause();
    }
    Say("holder pid=" + std::to_string(child));
  }

  // Standalone budget until the daemon says otherwise: 90% of the device.
  uint64_t budget = args.device_bytes / 10 * 9;
  PageStore store(args.pages, args.page_bytes);
  for (int it = 0; it < args.iterations; ++it) {
    std::deque<Directive> todo;
    {
      std::lock_guard<std::mutex> lock(mu);
      todo.swap(pending);
    }
    for (const Directive& d : todo) {
      if (d.kind != Directive::Kind::kBudget || d.gpu_uuid != args.gpu) continue;
      if (args.ignore_directives && d.id != 0) continue;
      budget = d.budget_bytes;
      store.EvictDownTo(budget);
      Say("budget " + std::to_string(budget));
      client->Ack(d.id, store.resident_bytes() <= budget, store.Usage(args.gpu));
    }
    // Each iteration writes two pages and reads one, like a tiny training step.
    for (int k = 0; k < 2; ++k) {
      const int p = (it * 7 + k * 13) % args.pages;
      // Work never waits for memory: below one page of budget it keeps a single page.
      memvirt::testing::FillPage(p, it, store.Touch(p, std::max(budget, args.page_bytes)));
    }
    memvirt::client::HintBatch batch;
    batch.iteration = static_cast<uint64_t>(it);
    if (it == 0) batch.allocs.push_back({1, args.gpu, args.pages * args.page_bytes, false});
    batch.usage.push_back(store.Usage(args.gpu));
    client->SendHints(std::move(batch));
    std::this_thread::sleep_for(std::chrono::milliseconds(args.iteration_ms));
  }
  uint64_t checksum = memvirt::testing::kFnvOffset;
  for (int p = 0; p < args.pages; ++p) {
    // A page never written has no contents (FillPage defines what a written page holds).
    checksum = memvirt::testing::Fnv1a(store.Contents(p), checksum);
  }
  char line[128];
  std::snprintf(line, sizeof(line),
                "done checksum=%016" PRIx64 " iterations=%d registrations=%" PRIu64, checksum,
                args.iterations, client->registrations());
  client->Close();
  Say(line);
  return 0;
}
