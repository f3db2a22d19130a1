#include "emulator-daemon/fabric_link.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/json_integer.h"
#include "common/log.h"
#include "emulator-daemon/fabric_datagram.h"
#include "emulator-daemon/fabric_delivery.h"
#include "transport/engine/timing.h"
#include "transport/link/shm_ring.h"
#include "transport/wire/packet.h"

namespace ibemu {

namespace {

constexpr size_t kRoutes = 0xc000;  // unicast LIDs
constexpr uint32_t kRingSlots = 4096;
constexpr int kReceiveBatch = 16;
constexpr size_t kMaxDatagram = 65536;
constexpr int kSocketBuffer = 8 << 20;
// Packets wait in a batch at most this many packets before it is sent.
constexpr int kFlushEvery = 256;
// While packets wait for room in a program's inbox, how often the receive
// thread looks for it.
constexpr int64_t kQueuedRetryNs = 20'000;

uint64_t addr_key(const sockaddr_in& a) {
  return uint64_t(ntohl(a.sin_addr.s_addr)) << 16 | ntohs(a.sin_port);
}

std::string addr_name(const sockaddr_in& a) {
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
  return fmt::format("{}:{}", ip, ntohs(a.sin_port));
}

/// "host[:port]" as an IPv4 socket address; throws when it does not resolve.
sockaddr_in resolve_address(const std::string& text, uint16_t default_port) {
  std::string host = text;
  uint16_t port = default_port;
  if (auto colon = text.rfind(':'); colon != std::string::npos) {
    host = text.substr(0, colon);
    const std::string p = text.substr(colon + 1);
    char* end = nullptr;
    const unsigned long v = std::strtoul(p.c_str(), &end, 10);
    if (p.empty() || *end || v == 0 || v > 65535)
      throw std::runtime_error("fabric: bad port in '" + text + "'");
    port = uint16_t(v);
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0 || !res)
    throw std::runtime_error("fabric: cannot resolve '" + host + "': " + gai_strerror(rc));
  sockaddr_in a{};
  std::memcpy(&a, res->ai_addr, sizeof a);
  freeaddrinfo(res);
  a.sin_port = htons(port);
  return a;
}

void grow_buffer(int fd, int opt_force, int opt) {
  // As root the limit of net.core.[rw]mem_max does not apply.
  if (setsockopt(fd, SOL_SOCKET, opt_force, &kSocketBuffer, sizeof kSocketBuffer) != 0)
    setsockopt(fd, SOL_SOCKET, opt, &kSocketBuffer, sizeof kSocketBuffer);
}

}  // namespace

FabricLink::FabricLink(boost::asio::io_context& io, const FabricConfig& cfg, uint64_t switch_guid,
                       std::string runtime_dir, Events events)
    : io_(io),
      cfg_(cfg),
      switch_guid_(switch_guid),
      runtime_dir_(std::move(runtime_dir)),
      events_(std::move(events)),
      accept_joins_(!cfg.seed.empty()),
      peers_(std::make_unique<Peer[]>(size_t(cfg.max_hosts - 1))),
      routes_(std::make_unique<std::atomic<int8_t>[]>(kRoutes)),
      auth_(cfg.secret),
      hello_timer_(io) {
  for (size_t i = 0; i < kRoutes; ++i) routes_[i] = -1;
}

FabricLink::~FabricLink() { stop(); }

void FabricLink::start() {
  const sockaddr_in local = resolve_address(cfg_.bind, cfg_.port);
  std::vector<sockaddr_in> initial;
  for (const auto& p : cfg_.peers) initial.push_back(resolve_address(p, cfg_.port));
  if (!cfg_.seed.empty()) initial.push_back(resolve_address(cfg_.seed, cfg_.port));

  fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) throw std::runtime_error(std::string("fabric: socket: ") + std::strerror(errno));
  grow_buffer(fd_, SO_RCVBUFFORCE, SO_RCVBUF);
  grow_buffer(fd_, SO_SNDBUFFORCE, SO_SNDBUF);
  if (bind(fd_, reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(
        fmt::format("fabric: cannot bind UDP {}: {}", addr_name(local), std::strerror(err)));
  }
  if (int err = ring_.create(uint32_t(wire::kMaxPacket + link::kSlotHeader), kRingSlots))
    throw std::runtime_error(std::string("fabric: uplink ring: ") + std::strerror(err));
  for (const auto& a : initial)
    if (peer_of(a) < 0) add_peer(a);

  started_ = true;
  sender_ = std::thread([this] { send_loop(); });
  receiver_ = std::thread([this] { receive_loop(); });
  log_info("fabric: UDP {} with {} peer(s){}", addr_name(local), peer_count(),
           accept_joins_ ? fmt::format(", joining through seed {}", cfg_.seed) : "");
  hello_tick();
}

void FabricLink::stop() {
  if (!started_.exchange(false)) return;
  stopping_ = true;
  hello_timer_.cancel();
  ring_.wake();
  {
    // A request of the receive thread in flight ends now.
    std::lock_guard lock(delivery_mutex_);
    if (delivery_) delivery_->shut_down();
  }
  if (sender_.joinable()) sender_.join();
  if (receiver_.joinable()) receiver_.join();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int FabricLink::add_peer(const sockaddr_in& addr) {
  std::lock_guard lock(peers_mutex_);
  const int n = peer_count_.load();
  if (n >= cfg_.max_hosts - 1) return -1;
  Peer& p = peers_[size_t(n)];
  p.addr = addr;
  p.name = addr_name(addr);
  by_addr_[addr_key(addr)] = n;
  peer_count_.store(n + 1, std::memory_order_release);
  return n;
}

int FabricLink::peer_of(const sockaddr_in& addr) const {
  std::lock_guard lock(peers_mutex_);
  auto it = by_addr_.find(addr_key(addr));
  return it == by_addr_.end() ? -1 : it->second;
}

bool FabricLink::any_up() const {
  for (int i = 0; i < peer_count(); ++i)
    if (peers_[size_t(i)].up) return true;
  return false;
}

void FabricLink::set_routes(const std::vector<int8_t>& by_lid) {
  for (size_t lid = 0; lid < kRoutes; ++lid)
    routes_[lid].store(lid < by_lid.size() ? by_lid[lid] : int8_t(-1), std::memory_order_relaxed);
}

void FabricLink::send_management(int uplink, const std::vector<uint8_t>& packet) {
  if (uplink < 0 || uplink >= peer_count() || !peers_[size_t(uplink)].up) return;
  Peer& p = peers_[size_t(uplink)];
  fabric::PacketBatch batch(packet.size() + fabric::kHeaderSize + fabric::kEntryHeader);
  if (!batch.add(packet.data(), packet.size())) return;
  if (!send_to(p, batch.data(), batch.size())) return;
  ++p.tx_packets;
  ++p.tx_datagrams;
}

bool FabricLink::send_to(Peer& p, const uint8_t* data, size_t len) {
  // Signed (datagram_auth.h) when the hosts share a secret. The hello timer
  // and the send thread both come here: each thread signs into its own buffer.
  thread_local std::vector<uint8_t> signed_copy;
  if (auth_.enabled()) {
    signed_copy.resize(len + fabric::kAuthTrailer);
    len = auth_.sign(data, len, signed_copy.data());
    data = signed_copy.data();
  }
  // A full socket buffer or an unreachable neighbour loses the datagram, as
  // a congested or broken network would; it is counted.
  if (sendto(fd_, data, len, 0, reinterpret_cast<const sockaddr*>(&p.addr), sizeof p.addr) >= 0)
    return true;
  ++p.send_errors;
  return false;
}

int FabricLink::set_cable(const std::string& address, bool plugged) {
  for (int i = 0; i < peer_count(); ++i) {
    Peer& p = peers_[size_t(i)];
    if (p.self || (p.name != address && p.name.rfind(address + ":", 0) != 0)) continue;
    p.pulled = !plugged;
    // Pulled: down at once here; the peer notices our silence. Plugged:
    // up again with the peer's next hello.
    if (!plugged) set_up(i, false);
    log_info("fabric: cable to {} {}", p.name, plugged ? "plugged in" : "pulled");
    return i;
  }
  return -1;
}

// --- liveness, on the daemon's thread ---

void FabricLink::hello_tick() {
  if (stopping_) return;
  nlohmann::json hello = events_.hello_fields ? events_.hello_fields() : nlohmann::json::object();
  hello["guid"] = switch_guid_;
  if (accept_joins_) {
    // Members learn each other from the seed (and from any member).
    nlohmann::json known = nlohmann::json::array();
    for (int i = 0; i < peer_count(); ++i)
      if (peers_[size_t(i)].up) known.push_back(peers_[size_t(i)].name);
    hello["peers"] = known;
  }
  const auto datagram = fabric::hello_datagram(hello.dump());
  // Silence counts only up to the moment this host last listened: a host that
  // did not run its receive thread for a while (an overloaded VM) has
  // datagrams waiting, and must not take its own deafness for the peers'
  // death (and drop what they sent meanwhile as coming over a dead link).
  const int64_t heard_all_until = heard_all_until_ns_.load();
  for (int i = 0; i < peer_count(); ++i) {
    Peer& p = peers_[size_t(i)];
    if (p.self || p.pulled) continue;
    send_to(p, datagram.data(), datagram.size());
    if (p.up && heard_all_until - p.last_heard_ns.load() > int64_t(cfg_.dead_ms) * 1000000)
      set_up(i, false);
  }
  hello_timer_.expires_after(std::chrono::milliseconds(cfg_.hello_ms));
  hello_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) hello_tick();
  });
}

void FabricLink::set_up(int uplink, bool up) {
  Peer& p = peers_[size_t(uplink)];
  if (p.up.exchange(up) == up) return;
  log_info("fabric: peer {} (switch {:#018x}) {}", p.name, p.guid,
           up ? "is up" : fmt::format("is down: silent for {} ms", cfg_.dead_ms));
  if (events_.link_change) events_.link_change(uplink, up);
}

void FabricLink::on_hello(const sockaddr_in& from, const std::string& text) {
  nlohmann::json hello = nlohmann::json::parse(text, nullptr, false);
  if (!hello.is_object() || !hello.contains("guid") || !hello["guid"].is_number_unsigned()) {
    ++malformed_;
    return;
  }
  const uint64_t guid = json_integer<uint64_t>(hello["guid"]);
  int uplink = peer_of(from);
  if (guid == switch_guid_) {
    // Our own hello: the seed (or a listed peer) is this host.
    if (uplink >= 0) peers_[size_t(uplink)].self = true;
    return;
  }
  if (uplink < 0) {
    if (!accept_joins_) {
      ++unknown_source_drops_;
      return;
    }
    uplink = add_peer(from);
    if (uplink < 0) {
      log_warn("fabric: {} wants to join, but all {} inter-host ports are used", addr_name(from),
               cfg_.max_hosts - 1);
      return;
    }
  }
  Peer& p = peers_[size_t(uplink)];
  if (p.self || p.pulled) return;
  p.guid = guid;
  p.last_heard_ns = engine::now_ns();
  set_up(uplink, true);
  if (events_.hello_received) events_.hello_received(uplink, hello);
  if (accept_joins_ && hello.contains("peers") && hello["peers"].is_array()) {
    for (const auto& name : hello["peers"]) {
      if (!name.is_string()) continue;
      try {
        const sockaddr_in a = resolve_address(name.get<std::string>(), cfg_.port);
        if (peer_of(a) < 0) add_peer(a);
      } catch (const std::exception&) {
        ++malformed_;
      }
    }
  }
}

// --- the data path, on its own threads ---

void FabricLink::send_loop() {
  const int n_slots = cfg_.max_hosts - 1;
  // The authentication trailer must fit in datagram_bytes too.
  const size_t limit = size_t(cfg_.datagram_bytes) - (auth_.enabled() ? fabric::kAuthTrailer : 0);
  std::vector<fabric::PacketBatch> batches(size_t(n_slots), fabric::PacketBatch{limit});
  auto flush = [&](int u) {
    fabric::PacketBatch& b = batches[size_t(u)];
    if (b.empty()) return;
    Peer& p = peers_[size_t(u)];
    if (send_to(p, b.data(), b.size())) {
      p.tx_packets += b.count();
      ++p.tx_datagrams;
    }
    b.clear();
  };
  auto add = [&](int u, const uint8_t* pkt, size_t len) {
    Peer& p = peers_[size_t(u)];
    if (!p.up || p.self) {
      ++p.tx_drops;
      return;
    }
    if (!batches[size_t(u)].add(pkt, len)) {
      flush(u);
      batches[size_t(u)].add(pkt, len);
    }
  };
  int pending = 0;
  while (!stopping_) {
    size_t len = 0;
    const uint8_t* pkt = ring_.peek(&len);
    if (!pkt) {
      for (int u = 0; u < n_slots; ++u) flush(u);
      pending = 0;
      ring_.wait(50'000'000);
      continue;
    }
    if (len >= wire::Lrh::kSize) {
      const uint16_t dlid = wire::Lrh::from(pkt).dlid();
      if (wire::is_multicast_lid(dlid)) {
        // The switches replicate a multicast packet to every host.
        for (int u = 0; u < peer_count(); ++u)
          if (peers_[size_t(u)].up) add(u, pkt, len);
      } else if (const int u = dlid < kRoutes ? routes_[dlid].load(std::memory_order_relaxed) : -1;
                 u >= 0 && u < peer_count()) {
        add(u, pkt, len);
      }
    }
    ring_.pop();
    if (++pending >= kFlushEvery) {
      for (int u = 0; u < n_slots; ++u) flush(u);
      pending = 0;
    }
  }
}

void FabricLink::receive_loop() {
  // Connects once the daemon's control socket serves; a failed attempt
  // starts over with a fresh session.
  auto connect = [this] {
    auto fresh = std::make_unique<FabricDelivery>();
    const bool ok = fresh->connect(runtime_dir_) == 0;
    std::lock_guard lock(delivery_mutex_);
    delivery_ = std::move(fresh);
    return ok;
  };
  std::vector<uint8_t> buffers(size_t(kReceiveBatch) * kMaxDatagram);
  mmsghdr msgs[kReceiveBatch];
  iovec iovs[kReceiveBatch];
  sockaddr_in from[kReceiveBatch];
  int64_t next_due = 0;
  while (!stopping_) {
    if ((!delivery_ || !delivery_->connected()) && !connect()) {
      // The daemon's socket is not serving yet, or it stops.
      usleep(10000);
      continue;
    }
    for (int i = 0; i < kReceiveBatch; ++i) {
      iovs[i] = {buffers.data() + size_t(i) * kMaxDatagram, kMaxDatagram};
      msgs[i] = {};
      msgs[i].msg_hdr.msg_iov = &iovs[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_name = &from[i];
      msgs[i].msg_hdr.msg_namelen = sizeof from[i];
    }
    // Sleep only when nothing is waiting: under load, one call per batch.
    const int64_t before_receive = engine::now_ns();
    const int n = recvmmsg(fd_, msgs, kReceiveBatch, MSG_DONTWAIT, nullptr);
    if (n <= 0) {
      heard_all_until_ns_.store(before_receive);
      int64_t timeout_ns = 50'000'000;
      if (next_due) timeout_ns = std::clamp<int64_t>(next_due - engine::now_ns(), 0, timeout_ns);
      // Packets wait for room in a program's inbox: look again soon.
      if (delivery_->queuing()) timeout_ns = std::min<int64_t>(timeout_ns, kQueuedRetryNs);
      pollfd pfd{fd_, POLLIN, 0};
      const timespec ts{0, long(timeout_ns)};
      ppoll(&pfd, 1, &ts, nullptr);
      next_due = delivery_->release_held(engine::now_ns());
      delivery_->flush_queued(engine::now_ns());
      continue;
    }
    for (int i = 0; i < n; ++i) {
      const uint8_t* data = buffers.data() + size_t(i) * kMaxDatagram;
      size_t len = msgs[i].msg_len;
      const auto kind = fabric::datagram_kind(data, len);
      if (!kind) {
        ++malformed_;
        continue;
      }
      // Before anything else believes it, hellos included: a stranger with
      // a peer's address, or a replay, gets nowhere.
      if (!auth_.verify(data, &len, addr_key(from[i]))) {
        ++unauthenticated_drops_;
        continue;
      }
      // Any datagram from a peer says it is alive, a hello as much as packets.
      const int u = peer_of(from[i]);
      if (u >= 0)
        peers_[size_t(u)].last_heard_ns.store(engine::now_ns(), std::memory_order_relaxed);
      if (*kind == fabric::Kind::kHello) {
        boost::asio::post(
            io_, [this, f = from[i], text = fabric::hello_text(data, len)] { on_hello(f, text); });
        continue;
      }
      if (u < 0) {
        ++unknown_source_drops_;
        continue;
      }
      Peer& p = peers_[size_t(u)];
      ++p.rx_datagrams;
      if (!p.up || p.pulled) continue;  // a link that is down carries nothing
      bool malformed = false;
      p.rx_packets += fabric::for_each_packet(
          data, len,
          [&](const uint8_t* pkt, size_t plen) {
            wire::PacketView v;
            if (wire::parse_packet(pkt, plen, &v, false) != wire::ParseError::kOk) {
              ++malformed_;
              return;
            }
            if (v.bth().dest_qp() <= 1 && v.deth().src_qp() <= 1 &&
                v.opcode() == uint8_t(wire::Opcode::kUdSendOnly)) {
              boost::asio::post(io_, [this, u, copy = std::vector<uint8_t>(pkt, pkt + plen)] {
                if (events_.management) events_.management(u, copy);
              });
              return;
            }
            delivery_->deliver(v.lrh().dlid(), v.bth().dest_qp(), pkt, plen);
          },
          &malformed);
      if (malformed) ++malformed_;
    }
    next_due = delivery_->release_held(engine::now_ns());
    delivery_->flush_queued(engine::now_ns());
  }
}

nlohmann::json FabricLink::describe() const {
  nlohmann::json peers = nlohmann::json::array();
  for (int i = 0; i < peer_count(); ++i) {
    const Peer& p = peers_[size_t(i)];
    if (p.self) continue;
    peers.push_back({{"address", p.name},
                     {"uplink", i},
                     {"up", p.up.load()},
                     {"cable", !p.pulled.load()},
                     {"switch_guid", fmt::format("{:#018x}", p.guid)},
                     {"tx_packets", p.tx_packets.load()},
                     {"tx_datagrams", p.tx_datagrams.load()},
                     {"tx_drops", p.tx_drops.load()},
                     {"send_errors", p.send_errors.load()},
                     {"rx_packets", p.rx_packets.load()},
                     {"rx_datagrams", p.rx_datagrams.load()}});
  }
  return {{"listen", fmt::format("{}:{}", cfg_.bind, cfg_.port)},
          {"seed", cfg_.seed},
          {"dead_ms", cfg_.dead_ms},
          {"peers", peers},
          {"unknown_source_drops", unknown_source_drops_.load()},
          {"authenticated", auth_.enabled()},
          {"unauthenticated_drops", unauthenticated_drops_.load()},
          {"malformed", malformed_.load()}};
}

}  // namespace ibemu
