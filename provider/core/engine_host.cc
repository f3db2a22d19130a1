#include "provider/core/engine_host.h"

#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "common/capture_record.h"
#include "provider/core/diagnostics.h"
#include "transport/engine/timing.h"
#include "transport/wire/lrh.h"
#include "transport/wire/packet.h"

namespace ibemu::provider {

namespace {
// With CPUs to spare, spin this long on an empty inbox before sleeping: keeps
// latency low under traffic while an idle process costs nothing. With fewer
// CPUs the thread sleeps at once: a spinning progress thread takes the CPU
// from the very threads that need it (the application that waits on memory
// for a WRITE, the peer's progress thread), and a woken one only runs when
// the kernel lets it preempt. On 2 CPUs ib_write_lat's 99th percentile went
// from about 2 ms to under 100 us without the spin.
constexpr engine::Nanos kSpinNs = 20'000;
constexpr uint32_t kInboxSlots = 1024;
// An application thread that polled within this window is taken as polling
// and left to drain the inbox.
constexpr engine::Nanos kAppPollGraceNs = 15'000;
// ... but a program may stop polling its CQ and wait on memory for the peer's
// RDMA WRITE (ib_write_lat does). With CPUs to spare, the progress thread
// watches the inbox by spinning while the application polls, and takes over a
// packet that waited this long (a polling application drains one within a few
// hundred nanoseconds). With fewer CPUs it sleeps through the polling window
// and looks once at its end: waking more often takes the CPU from the polling
// threads themselves (ibv_rc_pingpong on 2 CPUs went from 30 us to over
// 500 us per round trip with 2 us looks).
constexpr engine::Nanos kStallWhenSpinningNs = 500;
// While the link queues packets for a full ring, how often it looks for
// room: the receiver drains a ring within microseconds when it runs.
constexpr engine::Nanos kQueuedRetryNs = 20'000;
// A timer scan may start once this many times its last duration has passed
// since the last one began.
constexpr engine::Nanos kScansPerDrain = 10;
constexpr int kCpusToSpinWhileAppPolls = 4;

bool enough_cpus_to_spin() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return false;
  return CPU_COUNT(&set) >= kCpusToSpinWhileAppPolls;
}

// engine::QpEnv::stall_tolerance. On a 2-CPU VM whose host took 20-70% of
// its CPU time (vmstat's "st"), daemons were seen not running for up to
// 2.5 s; IBEMU_STALL_TOLERANCE_MS=0 gives IBA's exact retry timing.
constexpr long kDefaultStallToleranceMs = 10000;

engine::Nanos stall_tolerance_from_env() {
  long ms = kDefaultStallToleranceMs;
  if (const char* env = std::getenv("IBEMU_STALL_TOLERANCE_MS"); env && *env) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (*end == '\0' && v >= 0) ms = v;
  }
  return engine::Nanos{ms} * 1'000'000;
}
}  // namespace

EngineHost::~EngineHost() {
  stop_progress();
  // Packets a link delays are on the wire already: they arrive even though
  // their sender closes its device (only sooner).
  if (link_) link_->release_held(std::numeric_limits<int64_t>::max());
  if (engine_ && std::getenv("IBEMU_STATS")) {
    // One line per port on exit: what crossed this context and what was lost.
    auto& c = engine_->counters();
    for (int p = 1; p <= num_ports() && p <= engine::kCounterPorts; ++p) {
      PortTotals t;
      t.add(c.port[p]);
      std::fprintf(stderr, "libibemu: %s port %d %s\n", page_->devices[device_index_].name, p,
                   t.to_json().dump().c_str());
    }
    std::fprintf(stderr, "libibemu: %s malformed %llu wrong_dlid %llu\n",
                 page_->devices[device_index_].name,
                 static_cast<unsigned long long>(c.rcv_malformed.load()),
                 static_cast<unsigned long long>(c.rcv_wrong_dlid.load()));
  }
  if (device_index_ >= 0 && daemon_.connected() && !daemon_lost_) {
    Json reply;
    daemon_.request({{"op", "close_context"}, {"device", device_index_}, {"context", context_id_}},
                    &reply);
  }
  if (page_) munmap(const_cast<StatePage*>(page_), sizeof(StatePage));
}

void EngineHost::start_progress() {
  progress_ = std::thread([this] { progress_loop(); });
}

void EngineHost::stop_progress() noexcept {
  stopping_ = true;
  if (progress_.joinable()) {
    inbox_.wake();
    progress_.join();
  }
}

void EngineHost::leave_daemon() noexcept {
  stop_progress();
  daemon_.close();
}

void EngineHost::watch_daemon() noexcept {
  if (daemon_lost_) return;
  pollfd pfd{daemon_.fd(), 0, 0};
  if (poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLHUP | POLLERR))) {
    // The emulated HCA is gone with its daemon, as when firmware dies:
    // nothing more completes on its own, so every outstanding WR is
    // flushed now rather than left for the program to wait on.
    daemon_lost_ = true;
    engine_->device_fatal();
    on_daemon_lost();
  }
}

int EngineHost::open_engine(const RuntimePaths& paths, const char* ibdev_name,
                            const char* role) noexcept {
  if (int err = daemon_.connect(paths.socket())) {
    std::fprintf(stderr, "libibemu: %s\n", daemon_not_running_message(paths.socket()).c_str());
    return err == ENOENT ? ENODEV : err;
  }
  Json reply;
  std::vector<int> fds;
  const int said_hello = daemon_.request(
      {{"op", "hello"}, {"role", role}, {"pid", getpid()}, {"want_state_page", true}}, &reply, {},
      &fds);
  if (said_hello || !reply_ok(reply) || fds.size() != 1) {
    for (int fd : fds) close(fd);
    // A daemon past one of its limits says which (docs/security.md).
    const int err = reply_errno(said_hello, reply, EIO);
    const auto why = reply.find("error");
    if (err != EIO && why != reply.end() && why->is_string())
      std::fprintf(stderr, "libibemu: ibemud refused the connection: %s\n",
                   why->get_ref<const std::string&>().c_str());
    return err;
  }
  session_ = reply_uint_or(reply, "session", 0);
  const uint64_t registered_bytes_limit = reply_uint_or(reply, "registered_bytes_per_context", 0);
  void* p = mmap(nullptr, sizeof(StatePage), PROT_READ, MAP_SHARED, fds[0], 0);
  close(fds[0]);
  if (p == MAP_FAILED) return errno;
  page_ = static_cast<const StatePage*>(p);
  for (uint32_t i = 0; i < page_->num_devices && i < kMaxDevices; ++i)
    if (std::strncmp(page_->devices[i].name, ibdev_name, sizeof(page_->devices[i].name)) == 0)
      device_index_ = static_cast<int>(i);
  if (device_index_ < 0) return ENODEV;

  // A slot holds a packet, or a message with a whole packet inside.
  if (int err = inbox_.create(engine::kMaxMessage + link::kSlotHeader, kInboxSlots)) return err;
  int inbox_dup = dup(inbox_.fd());
  if (daemon_.request({{"op", "register_inbox"}}, &reply, {inbox_dup}) || !reply_ok(reply)) {
    close(inbox_dup);
    return EIO;
  }
  close(inbox_dup);
  if (int err = counters_.create()) return err;
  // Without a snapshot page the context still works; status just shows
  // none of its objects.
  std::vector<int> pages = {dup(counters_.fd())};
  if (snapshot_page_.create() == 0) pages.push_back(dup(snapshot_page_.fd()));
  const bool opened =
      daemon_.request({{"op", "open_context"}, {"device", device_index_}}, &reply, pages) == 0 &&
      reply_ok(reply);
  for (int fd : pages) close(fd);
  if (!opened) return reply_errno(0, reply, EIO);
  context_id_ = reply_uint_or(reply, "context", 0);

  link_ = std::make_unique<ShmLink>(&daemon_, device_index_);
  link_->forget_routes_on(&page_->inboxes_closed);
  link_->on_discard([this](const uint8_t* packet, size_t len, ShmLink::Discard why) {
    count_discard(packet, len, why);
  });
  link_->on_queued([this] { inbox_.wake(); });
  link_->attach_capture(
      std::make_unique<CaptureMirror>(page_, device_index_, paths.dir + "/" + kCaptureSocketName));
  auto faults = std::make_unique<LinkFaults>(page_, device_index_, counters_.get(),
                                             [this] { inbox_.wake(); });
  engine::PacketSink* sink = link_.get();
  if (diagnostics::on(diagnostics::kPackets)) {
    faults->on_drop([](const uint8_t* packet, size_t len, const char* why) {
      trace_packet("drop", packet, len, why);
    });
    traced_link_ = std::make_unique<TracingPacketSink>(link_.get());
    sink = traced_link_.get();
  }
  link_->attach_faults(std::move(faults));
  engine_ = std::make_unique<engine::HcaEngine>(sink, this, counters_.get(), link_.get(), session_);
  forced_naks_ = std::make_unique<ForcedNakTable>(page_, device_index_);
  engine_->set_forced_naks(forced_naks_.get());
  // Packets between processes of one host never leave memory this host
  // controls; verifying the CRCs would only cost time.
  engine_->set_verify_crcs(false);
  engine_->set_stall_tolerance(stall_tolerance_from_env());
  if (diagnostics::on(diagnostics::kChecks)) engine_->set_spec_observer(&checks_);
  engine_->mrs().set_limits(engine::DeviceLimits::kMaxMr, registered_bytes_limit);
  return 0;
}

engine::PortAddress EngineHost::port(uint8_t port_num) const noexcept {
  engine::PortAddress a;
  if (port_num < 1 || port_num > device().num_ports || port_num > kMaxPorts) return a;
  PortStateView v = port_view(port_num);
  a.lid = v.lid;
  a.lmc = v.lmc;
  a.active_mtu = v.active_mtu;
  a.subnet_prefix = v.subnet_prefix;
  a.port_guid = v.port_guid;
  a.active = v.state == static_cast<uint8_t>(PortState::kActive);
  a.num_pkeys = std::min<uint8_t>(v.num_pkeys, uint8_t(a.pkeys.size()));
  std::copy(v.pkeys, v.pkeys + a.num_pkeys, a.pkeys.begin());
  return a;
}

int EngineHost::drain_inbox(int budget) noexcept {
  int n = 0;
  size_t len;
  link::SlotKind kind;
  while (n < budget) {
    const uint8_t* pkt = inbox_.peek(&len, &kind);
    if (!pkt) break;
    if (kind == link::SlotKind::kPacket) {
      if (diagnostics::on(diagnostics::kPackets)) trace_packet("rx", pkt, len);
      engine_->receive(pkt, len);
    } else if (!engine_->receive_message(pkt, len)) {
      on_message(pkt, len);
    }
    inbox_.pop();
    ++n;
  }
  return n;
}

bool EngineHost::try_progress() noexcept {
  const engine::Nanos now = engine::now_ns();
  last_app_poll_.store(now, std::memory_order_relaxed);
  bool worked = flush_link(now);
  std::unique_lock lock(consumer_mutex_, std::try_to_lock);
  return (lock.owns_lock() && drain_inbox(64) > 0) || worked;
}

bool EngineHost::flush_link(engine::Nanos now) noexcept {
  const bool moved = link_->queuing() && link_->flush_queued(now) > 0;
  // The QPs that stopped go on once nothing waits any more: resumed as soon
  // as some packets moved, each would queue one more packet behind the
  // rest, and thousands of QPs would grow the queue faster than the
  // receiver drains it. So what waits is at most a packet or so per QP.
  if (!link_->queuing()) engine_->link_ready();
  return moved;
}

void EngineHost::count_discard(const uint8_t* packet, size_t len, ShmLink::Discard why) noexcept {
  if (len < wire::Lrh::kSize) return;
  const int port = page_->port_of_lid(device_index_, wire::Lrh::from(packet).slid());
  engine::PortCounters& c = counters_.get()->at(unsigned(port));
  const bool stalled = why == ShmLink::Discard::kReceiverStalled;
  (stalled ? c.xmit_stalled_discards : c.xmit_discards)++;
  if (diagnostics::on(diagnostics::kPackets))
    trace_packet("drop", packet, len,
                 stalled ? "receiver_stalled: its inbox took nothing for the head-of-queue lifetime"
                         : "undeliverable: its program left");
}

void EngineHost::progress_loop() noexcept {
  pthread_setname_np(pthread_self(), "ibemu-progress");
  // Sleeps here are tens of microseconds: the default 50 us timer slack would
  // double them.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  engine::Nanos next_timer = 0;
  engine::Nanos last_scan = 0;
  engine::Nanos scan_cost = 0;  // how long the last timer scan took
  engine::Nanos idle_since = 0;
  const bool spin_while_app_polls = enough_cpus_to_spin();
  const engine::Nanos stall_after = spin_while_app_polls ? kStallWhenSpinningNs : kAppPollGraceNs;
  const engine::Nanos spin_before_sleep = spin_while_app_polls ? kSpinNs : 0;
  uint64_t watched = link::ShmRing::kEmpty;  // the oldest packet waiting ...
  engine::Nanos watched_since = 0;           // ... and since when we saw it
  while (!stopping_.load(std::memory_order_relaxed)) {
    engine::Nanos now = engine::now_ns();
    bool app_polling = now - last_app_poll_.load(std::memory_order_relaxed) < kAppPollGraceNs;
    if (app_polling) {
      const uint64_t oldest = inbox_.oldest_pending();
      if (oldest == link::ShmRing::kEmpty || oldest != watched) {
        watched = oldest;
        watched_since = now;
      } else if (now - watched_since >= stall_after) {
        app_polling = false;  // stalled: nobody drains it
      }
    }
    bool worked = false;
    bool inbox_taken = false;  // an application thread is draining it
    if (!app_polling) {
      worked = flush_link(now);
      std::unique_lock lock(consumer_mutex_, std::try_to_lock);
      if (lock.owns_lock())
        worked |= drain_inbox(256) > 0;
      else
        inbox_taken = true;
    }
    // Timers are due at next_timer; QPs that started sending since the last
    // scan armed theirs without telling us, so scan at least every 1 ms. A
    // scan visits every QP: with thousands of them it takes milliseconds,
    // and scans back to back would leave the inbox undrained. So at most a
    // tenth of the thread's time goes to scans.
    const bool timers_due = (next_timer && now >= next_timer) || now - last_scan > 1'000'000;
    if (timers_due && now - last_scan >= kScansPerDrain * scan_cost) {
      next_timer = engine_->run_timers(now);
      // Packets that link faults delay or hold back leave on time too.
      if (const engine::Nanos held = link_->release_held(now))
        next_timer = next_timer ? std::min(next_timer, held) : held;
      last_scan = now;
      watch_daemon();
      on_scan();
      answer_snapshot_request();
      scan_cost = engine::now_ns() - now;
    }
    if (worked) {
      idle_since = 0;
      continue;
    }
    if (app_polling || inbox_taken) {
      // The application drains the inbox itself; only timers and stalls are
      // ours. Watch, without asking producers to wake us: a sleep announced
      // while the application has yet to take a packet would end at once,
      // and the thread would spin beside the one that does the work.
      if (spin_while_app_polls) continue;
      engine::Nanos wait = last_app_poll_.load(std::memory_order_relaxed) + kAppPollGraceNs - now;
      wait = std::max<engine::Nanos>(wait, 1'000);
      if (next_timer) wait = std::min(wait, std::max<engine::Nanos>(next_timer - now, 0));
      if (link_->queuing()) wait = std::min(wait, kQueuedRetryNs);
      inbox_.wait(wait, /*announce=*/false);
      idle_since = 0;
      continue;
    }
    if (!idle_since) idle_since = now;
    if (now - idle_since < spin_before_sleep) continue;
    // Sleep until a packet arrives or the next transport timer (at most
    // 10 ms, for timers armed meanwhile by application threads).
    engine::Nanos wait = 10'000'000;
    if (next_timer) wait = std::min(wait, std::max<engine::Nanos>(next_timer - now, 0));
    if (link_->queuing()) wait = std::min(wait, kQueuedRetryNs);
    inbox_.wait(wait);
  }
}

}  // namespace ibemu::provider
