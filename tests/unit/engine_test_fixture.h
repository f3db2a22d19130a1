#pragma once
// Helpers shared by the transport engine tests: fake ports, a fake link whose
// delivery the test controls (deliver, drop, duplicate, delay), registered
// buffers, work request builders, and two HCAs ("A" at LID 1, "B" at LID 2)
// with one QP each, connected RESET → INIT → RTR → RTS.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "transport/engine/hca_engine.h"
#include "transport/wire/packet.h"

namespace ibemu::engine::testing {

inline constexpr uint16_t kLidA = 1;
inline constexpr uint16_t kLidB = 2;
inline constexpr uint16_t kLidStranger = 3;  // a LID nobody connected to
inline constexpr uint64_t kGuidA = 0x0002c90300000101ull;
inline constexpr uint64_t kGuidB = 0x0002c90300000201ull;
inline constexpr uint64_t kSubnetPrefix = 0xfe80000000000000ull;
inline constexpr uint32_t kQpnA = 0x000011;
inline constexpr uint32_t kQpnB = 0x000022;
inline constexpr uint32_t kPd = 3;

/// One HCA with a single port (port 1); every other port number does not exist.
class FakePorts : public PortTable {
 public:
  FakePorts(uint16_t lid, uint64_t guid) {
    addr_.lid = lid;
    addr_.active_mtu = 5;
    addr_.subnet_prefix = kSubnetPrefix;
    addr_.port_guid = guid;
    addr_.active = true;
  }
  PortAddress port(uint8_t port_num) const noexcept override {
    return port_num == 1 ? addr_ : PortAddress{};
  }

 private:
  PortAddress addr_;
};

/// A packet as it went onto the fake link.
struct WirePacket {
  uint64_t seq = 0;  // transmit order over the whole link
  uint16_t dlid = 0;
  uint32_t dest_qp = 0;
  std::vector<uint8_t> bytes;

  wire::PacketView view() const {
    wire::PacketView v;
    EXPECT_EQ(wire::parse_packet(bytes.data(), bytes.size(), &v), wire::ParseError::kOk);
    return v;
  }
  uint16_t slid() const { return view().lrh().slid(); }
  uint32_t psn() const { return view().bth().psn(); }
  uint8_t opcode() const { return view().opcode(); }
  uint32_t flags() const { return view().info->flags; }
  bool is_request() const { return flags() & wire::kIsRequest; }
  bool is_ack() const { return flags() & wire::kIsAck; }
  wire::AckType ack_type() const { return wire::aeth_type(view().aeth().syndrome()); }
  uint8_t ack_value() const { return wire::aeth_value(view().aeth().syndrome()); }
  size_t payload_len() const { return view().payload_len; }
};

enum class Fate { kDeliver, kDrop, kDuplicate, kDelay };

/// A link that queues every transmitted packet and delivers only when the test
/// says so, to the engine that owns the packet's DLID.
class FakeLink : public PacketSink {
 public:
  void attach(uint16_t lid, HcaEngine* engine) { engines_[lid] = engine; }

  void transmit(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet,
                size_t len) noexcept override {
    WirePacket p{next_seq_++, dlid, dest_qp, std::vector<uint8_t>(packet, packet + len)};
    log_.push_back(p);
    queue_.push_back(std::move(p));
  }

  /// Decides what happens to each packet when it is delivered; unset = deliver.
  /// A delayed packet is delivered right after the next one (a reordering).
  std::function<Fate(const WirePacket&)> policy;

  /// Delivers queued packets, and every packet they cause, until none is left.
  size_t deliver_all() {
    size_t n = 0;
    while (!queue_.empty()) {
      WirePacket p = std::move(queue_.front());
      queue_.pop_front();
      ++n;
      const Fate fate = policy ? policy(p) : Fate::kDeliver;
      if (fate == Fate::kDelay && !held_) {
        held_ = std::move(p);
        continue;
      }
      if (fate != Fate::kDrop) dispatch(p);
      if (fate == Fate::kDuplicate) dispatch(p);
      if (held_) {
        dispatch(*held_);
        held_.reset();
      }
    }
    if (held_) {
      dispatch(*held_);
      held_.reset();
    }
    return n;
  }

  /// Throws away what is queued (a link that loses everything in flight).
  void discard_queued() { queue_.clear(); }
  /// Puts a crafted packet on the wire.
  void inject(uint16_t dlid, std::vector<uint8_t> bytes) {
    WirePacket p{next_seq_++, dlid, 0, std::move(bytes)};
    queue_.push_back(std::move(p));
  }

  /// Every packet transmitted so far, in order (crafted ones excluded).
  const std::vector<WirePacket>& log() const { return log_; }
  void clear_log() { log_.clear(); }
  size_t queued() const { return queue_.size(); }

 private:
  void dispatch(const WirePacket& p) {
    auto it = engines_.find(p.dlid);
    if (it != engines_.end()) it->second->receive(p.bytes.data(), p.bytes.size());
  }

  std::map<uint16_t, HcaEngine*> engines_;
  std::deque<WirePacket> queue_;
  std::optional<WirePacket> held_;
  std::vector<WirePacket> log_;
  uint64_t next_seq_ = 0;
};

/// A PacketSink that throws everything away (for tests that need no peer).
class NullSink : public PacketSink {
 public:
  void transmit(uint16_t, uint32_t, const uint8_t*, size_t) noexcept override { ++count; }
  size_t count = 0;
};

/// Recomputes lengths and CRCs of a (possibly edited) packet so that it
/// passes the receiver's well-formedness checks.
inline void reseal(std::vector<uint8_t>& bytes) {
  wire::PacketView v;
  ASSERT_EQ(wire::parse_packet(bytes.data(), bytes.size(), &v, false), wire::ParseError::kOk);
  const size_t header_len = v.header_len, payload_len = v.payload_len;
  bytes.resize(header_len + payload_len + 3 + wire::kIcrcSize + wire::kVcrcSize);
  bytes.resize(wire::finalize_packet(bytes.data(), header_len, payload_len));
}

/// A buffer registered with an engine's MR table; iova == address, as with ibv_reg_mr.
struct Region {
  std::vector<uint8_t> bytes;
  uint32_t key = 0;

  uint64_t addr(size_t offset = 0) const {
    return reinterpret_cast<uint64_t>(bytes.data()) + offset;
  }
  Sge sge(size_t offset, uint32_t length) const { return Sge{addr(offset), length, key}; }
};

inline Region register_region(HcaEngine& engine, size_t size, uint32_t access,
                              uint8_t fill = 0) {
  Region r;
  r.bytes.assign(size, fill);
  r.key = engine.mrs().add(kPd, r.bytes.data(), r.addr(), size, access);
  return r;
}

/// Bytes that differ from message to message and from position to position.
inline std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    v[i] = static_cast<uint8_t>(x >> 16);
  }
  return v;
}

inline SendWqe send_wr(uint64_t wr_id, WrOpcode op, const std::vector<Sge>& sges,
                       uint32_t flags = kSendSignaled) {
  SendWqe w;
  w.wr_id = wr_id;
  w.opcode = op;
  w.flags = flags;
  w.num_sge = static_cast<int>(sges.size());
  for (size_t i = 0; i < sges.size(); ++i) w.sge[i] = sges[i];
  return w;
}

inline SendWqe write_wr(uint64_t wr_id, const std::vector<Sge>& sges, uint64_t remote_addr,
                        uint32_t rkey, uint32_t flags = kSendSignaled) {
  SendWqe w = send_wr(wr_id, WrOpcode::kRdmaWrite, sges, flags);
  w.remote_addr = remote_addr;
  w.rkey = rkey;
  return w;
}

inline RecvWqe recv_wr(uint64_t wr_id, const std::vector<Sge>& sges) {
  RecvWqe w;
  w.wr_id = wr_id;
  w.num_sge = static_cast<int>(sges.size());
  for (size_t i = 0; i < sges.size(); ++i) w.sge[i] = sges[i];
  return w;
}

inline int post(Qp& qp, const SendWqe& w) {
  int bad = -1;
  return qp.post_send(&w, 1, &bad);
}
inline int post(Qp& qp, const RecvWqe& w) {
  int bad = -1;
  return qp.post_recv(&w, 1, &bad);
}

/// Attributes valid for every transition, so a test can pick any mask.
inline QpAttr full_attr(uint16_t dlid, uint32_t dest_qpn) {
  QpAttr a;
  a.qp_access_flags = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qkey = 0x11111111;
  a.ah.dlid = dlid;
  a.ah.port_num = 1;
  a.path_mtu = 5;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.rq_psn = 0x000123;
  a.sq_psn = 0x000456;
  a.max_rd_atomic = 1;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.dest_qp_num = dest_qpn;
  return a;
}

/// The attribute masks of the usual connection sequence (IBA 11.2.4.2).
inline uint32_t init_mask(QpType t) {
  return kQpState | kQpPkeyIndex | kQpPort | (t == QpType::kUd ? kQpQkey : kQpAccessFlags);
}
inline uint32_t rtr_mask(QpType t) {
  if (t == QpType::kUd) return kQpState;
  uint32_t m = kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn;
  if (t == QpType::kRc) m |= kQpMaxDestRdAtomic | kQpMinRnrTimer;
  return m;
}
inline uint32_t rts_mask(QpType t) {
  uint32_t m = kQpState | kQpSqPsn;
  if (t == QpType::kRc) m |= kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic;
  return m;
}

/// Moves a QP along RESET → INIT → RTR → RTS → SQD until it is in `target`
/// (ERR straight from RESET). Returns the first failing modify's errno.
inline int bring_to(Qp& qp, QpState target, QpAttr a) {
  const QpType t = qp.type();
  auto step = [&](QpState s, uint32_t mask) {
    a.qp_state = s;
    return qp.modify(a, mask);
  };
  if (target == QpState::kReset) return 0;
  if (target == QpState::kErr) return step(QpState::kErr, kQpState);
  if (int e = step(QpState::kInit, init_mask(t))) return e;
  if (target == QpState::kInit) return 0;
  if (int e = step(QpState::kRtr, rtr_mask(t))) return e;
  if (target == QpState::kRtr) return 0;
  if (int e = step(QpState::kRts, rts_mask(t))) return e;
  if (target == QpState::kRts) return 0;
  return step(QpState::kSqd, kQpState);
}

struct ConnectParams {
  QpType type = QpType::kRc;
  uint32_t path_mtu = 5;  // 1 = 256 … 5 = 4096
  uint8_t timeout = 8;    // 4.096 µs × 2^8 ≈ 1 ms
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 1;  // 10 µs
  uint32_t sq_psn_a = 0x000100;
  uint32_t sq_psn_b = 0x00a000;
  uint32_t access_a = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  uint32_t access_b = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  uint32_t max_send_wr = 256;
  uint32_t max_recv_wr = 256;
  uint32_t cq_capacity = 4096;
  bool sq_sig_all = false;
};

/// One HCA with one QP and its two CQs; completions are collected as polled.
struct Endpoint {
  Endpoint(FakeLink& link, uint16_t lid, uint64_t guid, uint32_t qpn, const ConnectParams& p)
      : ports(lid, guid),
        engine(&link, &ports),
        send_cq(p.cq_capacity, nullptr),
        recv_cq(p.cq_capacity, nullptr) {
    link.attach(lid, &engine);
    QpInit init;
    init.type = p.type;
    init.qpn = qpn;
    init.pd = kPd;
    init.send_cq = &send_cq;
    init.recv_cq = &recv_cq;
    init.max_send_wr = p.max_send_wr;
    init.max_recv_wr = p.max_recv_wr;
    init.max_send_sge = DeviceLimits::kMaxSge;
    init.max_recv_sge = DeviceLimits::kMaxSge;
    init.max_inline_data = DeviceLimits::kMaxInlineData;
    init.sq_sig_all = p.sq_sig_all;
    qp = engine.create_qp(init, [this](uint32_t, QpEvent e) { events.push_back(e); });
  }

  void poll() {
    Completion c[64];
    for (int n; (n = send_cq.poll(64, c)) > 0;) send_wcs.insert(send_wcs.end(), c, c + n);
    for (int n; (n = recv_cq.poll(64, c)) > 0;) recv_wcs.insert(recv_wcs.end(), c, c + n);
  }
  QpState state() { return qp->state(); }

  FakePorts ports;
  HcaEngine engine;
  CompletionQueue send_cq, recv_cq;
  std::shared_ptr<Qp> qp;
  std::vector<QpEvent> events;
  std::vector<Completion> send_wcs, recv_wcs;
};

/// Two HCAs on one fake link with an RC (or UC) connection between them.
class EnginePair {
 public:
  explicit EnginePair(const ConnectParams& p = {})
      : params(p), a(link, kLidA, kGuidA, kQpnA, p), b(link, kLidB, kGuidB, kQpnB, p) {
    connect(a, kLidB, kQpnB, p.sq_psn_b, p.sq_psn_a, p.access_a);
    connect(b, kLidA, kQpnA, p.sq_psn_a, p.sq_psn_b, p.access_b);
  }

  /// Delivers packets, runs both engines' timers and polls both sides'
  /// CQs until `done` holds or `limit` passes. Returns whether `done` held.
  bool run_until(const std::function<bool()>& done,
                 std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      step();
      if (done()) return true;
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  /// Keeps the link and timers going for `d` (to see that nothing else happens).
  void run_for(std::chrono::milliseconds d) {
    run_until([] { return false; }, d);
  }
  void step() {
    link.deliver_all();
    a.engine.run_timers(now_ns());
    b.engine.run_timers(now_ns());
    link.deliver_all();
    a.poll();
    b.poll();
  }

  uint32_t mtu() const { return 128u << params.path_mtu; }

  ConnectParams params;
  FakeLink link;
  Endpoint a, b;

 private:
  void connect(Endpoint& e, uint16_t dlid, uint32_t dest_qpn, uint32_t rq_psn, uint32_t sq_psn,
               uint32_t access) {
    QpAttr at;
    at.qp_state = QpState::kInit;
    at.pkey_index = 0;
    at.port_num = 1;
    at.qp_access_flags = access;
    ASSERT_EQ(e.qp->modify(at, init_mask(params.type)), 0);
    at.qp_state = QpState::kRtr;
    at.ah.dlid = dlid;
    at.ah.port_num = 1;
    at.path_mtu = params.path_mtu;
    at.dest_qp_num = dest_qpn;
    at.rq_psn = rq_psn;
    at.max_dest_rd_atomic = 1;
    at.min_rnr_timer = params.min_rnr_timer;
    ASSERT_EQ(e.qp->modify(at, rtr_mask(params.type)), 0);
    at.qp_state = QpState::kRts;
    at.sq_psn = sq_psn;
    at.timeout = params.timeout;
    at.retry_cnt = params.retry_cnt;
    at.rnr_retry = params.rnr_retry;
    at.max_rd_atomic = 1;
    ASSERT_EQ(e.qp->modify(at, rts_mask(params.type)), 0);
    ASSERT_EQ(e.qp->state(), QpState::kRts);
  }
};

}  // namespace ibemu::engine::testing
