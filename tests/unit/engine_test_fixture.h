#pragma once
// Helpers shared by the transport engine tests: fake ports, a fake link whose
// delivery the test controls (deliver, drop, duplicate, delay), registered
// buffers, work request builders, and two HCAs ("A" at LID 1, "B" at LID 2)
// with one QP each, connected RESET → INIT → RTR → RTS.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "transport/engine/hca_engine.h"
#include "transport/wire/packet.h"
#include "transport/wire/psn.h"

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
  void set_lmc(uint8_t lmc) { addr_.lmc = lmc; }
  /// What an SM's SubnSet(P_KeyTable) does to the port.
  void set_pkey(uint16_t index, uint16_t pkey) {
    addr_.pkeys[index] = pkey;
    addr_.num_pkeys = std::max<uint8_t>(addr_.num_pkeys, uint8_t(index + 1));
    ++pkey_generation_;
  }
  uint32_t pkey_generation() const noexcept override { return pkey_generation_; }

 private:
  PortAddress addr_;
  uint32_t pkey_generation_ = 0;
};

/// A packet as it went onto the fake link (or a message between contexts
/// of one HCA, which the link carries in the same order).
struct WirePacket {
  uint16_t dlid = 0;
  uint32_t dest_qp = 0;
  std::vector<uint8_t> bytes;
  bool message = false;
  uint64_t to_context = 0;  // messages: the destination context

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
/// says so, to the engine that owns the packet's DLID (of several engines of
/// one HCA at one LID, the one that has the destination QP). It also carries
/// the messages between contexts of one HCA (context_link.h), in order with
/// the packets; they are not in log().
class FakeLink : public PacketSink, public ContextLink {
 public:
  void attach(uint16_t lid, HcaEngine* engine) { engines_.emplace(lid, engine); }
  /// A context that messages reach as `id`.
  void attach_context(uint64_t id, HcaEngine* engine) { contexts_[id] = engine; }
  /// Context `owner` has XRC SRQ `srqn` (a negative answer once it is forgotten).
  void attach_srq(uint32_t srqn, uint64_t owner) { srq_owners_[srqn] = owner; }
  void detach_srq(uint32_t srqn) { srq_owners_.erase(srqn); }

  Delivery to_srq_owner(uint32_t srqn, const uint8_t* msg, size_t len) noexcept override {
    auto it = srq_owners_.find(srqn);
    if (it == srq_owners_.end()) return Delivery::kNoRoute;
    return to_context(it->second, msg, len);
  }
  Delivery to_context(uint64_t context, const uint8_t* msg, size_t len) noexcept override {
    if (!contexts_.count(context)) return Delivery::kNoRoute;
    WirePacket m;
    m.bytes.assign(msg, msg + len);
    m.message = true;
    m.to_context = context;
    ++messages_sent;
    queue_.push_back(std::move(m));
    return Delivery::kDelivered;
  }
  bool srq_owner_alive(uint32_t srqn) noexcept override { return srq_owners_.count(srqn) != 0; }

  /// Messages to the contexts this says are held wait until release_messages().
  std::function<bool(uint64_t context)> hold_messages_to;
  void release_messages() {
    for (WirePacket& m : held_messages_) queue_.push_back(std::move(m));
    held_messages_.clear();
  }
  size_t messages_sent = 0;

  TxResult transmit(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet,
                    size_t len) noexcept override {
    WirePacket p{dlid, dest_qp, std::vector<uint8_t>(packet, packet + len)};
    if (refuse && refuse(p)) {
      ++refused;
      return TxResult::kDiscarded;
    }
    log_.push_back(p);
    if (congested) {
      waiting_.push_back(std::move(p));
      return TxResult::kQueued;
    }
    queue_.push_back(std::move(p));
    return TxResult::kSent;
  }

  /// Packets this says yes to are given up at transmission, as a link gives
  /// up on a receiver that stalled: transmit() returns kDiscarded. They are
  /// not in log().
  std::function<bool(const WirePacket&)> refuse;
  size_t refused = 0;

  /// While set, the destination has no room: packets wait on the link
  /// (transmit() returns kQueued) until end_congestion().
  bool congested = false;
  /// The room is back: what waited goes on the wire, in order.
  void end_congestion() {
    congested = false;
    for (WirePacket& p : waiting_) queue_.push_back(std::move(p));
    waiting_.clear();
  }
  size_t waiting() const { return waiting_.size(); }

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
      if (p.message) {
        if (hold_messages_to && hold_messages_to(p.to_context))
          held_messages_.push_back(std::move(p));
        else
          contexts_[p.to_context]->receive_message(p.bytes.data(), p.bytes.size());
        continue;
      }
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
  /// What is on the link now, not yet delivered (a policy sees the packet it
  /// decides on removed from here).
  const std::deque<WirePacket>& queued() const { return queue_; }
  /// Every packet transmitted so far, in order.
  const std::vector<WirePacket>& log() const { return log_; }
  void clear_log() { log_.clear(); }

 private:
  void dispatch(const WirePacket& p) {
    auto [first, last] = engines_.equal_range(p.dlid);
    if (first == last) return;
    HcaEngine* to = first->second;
    for (auto it = first; it != last; ++it)
      if (it->second->find_qp(p.dest_qp)) to = it->second;
    to->receive(p.bytes.data(), p.bytes.size());
  }

  std::multimap<uint16_t, HcaEngine*> engines_;
  std::map<uint64_t, HcaEngine*> contexts_;
  std::map<uint32_t, uint64_t> srq_owners_;
  std::vector<WirePacket> held_messages_;
  std::deque<WirePacket> queue_;
  std::vector<WirePacket> waiting_;  // queued on the link while congested
  std::optional<WirePacket> held_;
  std::vector<WirePacket> log_;
};

/// A PacketSink that throws everything away (for tests that need no peer).
class NullSink : public PacketSink {
 public:
  TxResult transmit(uint16_t, uint32_t, const uint8_t*, size_t) noexcept override {
    ++count;
    return TxResult::kSent;
  }
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

/// The same packet with another payload: headers as they are (edited or
/// not), lengths, pad and CRCs made consistent again.
inline std::vector<uint8_t> with_payload(const std::vector<uint8_t>& bytes,
                                         const std::vector<uint8_t>& payload) {
  wire::PacketView v;
  EXPECT_EQ(wire::parse_packet(bytes.data(), bytes.size(), &v, false), wire::ParseError::kOk);
  std::vector<uint8_t> out(v.header_len + payload.size() + 3 + wire::kIcrcSize + wire::kVcrcSize);
  std::copy_n(bytes.begin(), v.header_len, out.begin());
  std::copy(payload.begin(), payload.end(), out.begin() + v.header_len);
  out.resize(wire::finalize_packet(out.data(), v.header_len, payload.size()));
  return out;
}

/// A buffer registered with an engine's MR table (iova == address, as with
/// ibv_reg_mr) and deregistered when it goes away, so that no key outlives
/// its memory.
struct Region {
  Region() = default;
  Region(Region&& o) noexcept
      : bytes(std::move(o.bytes)), key(o.key), mrs(std::exchange(o.mrs, nullptr)) {}
  Region& operator=(Region&& o) noexcept {
    if (this != &o) {
      release();
      bytes = std::move(o.bytes);
      key = o.key;
      mrs = std::exchange(o.mrs, nullptr);
    }
    return *this;
  }
  ~Region() { release(); }
  void release() {
    if (mrs) mrs->remove(key);
    mrs = nullptr;
  }

  std::vector<uint8_t> bytes;
  uint32_t key = 0;
  MrTable* mrs = nullptr;  // where `key` is registered; null: not owned

  uint64_t addr(size_t offset = 0) const {
    return reinterpret_cast<uint64_t>(bytes.data()) + offset;
  }
  Sge sge(size_t offset, uint32_t length) const { return Sge{addr(offset), length, key}; }
};

inline Region register_region(HcaEngine& engine, size_t size, uint32_t access, uint8_t fill = 0) {
  Region r;
  r.bytes.assign(size, fill);
  r.key = engine.mrs().add(kPd, r.bytes.data(), r.addr(), size, access);
  r.mrs = &engine.mrs();
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

inline SendWqe read_wr(uint64_t wr_id, const std::vector<Sge>& sges, uint64_t remote_addr,
                       uint32_t rkey, uint32_t flags = kSendSignaled) {
  SendWqe w = send_wr(wr_id, WrOpcode::kRdmaRead, sges, flags);
  w.remote_addr = remote_addr;
  w.rkey = rkey;
  return w;
}

/// LOCAL_INV or SEND with Invalidate of `rkey`, as ibv_send_wr.invalidate_rkey
/// carries it.
inline SendWqe invalidate_wr(uint64_t wr_id, WrOpcode op, uint32_t rkey,
                             const std::vector<Sge>& sges = {}) {
  SendWqe w = send_wr(wr_id, op, sges);
  w.imm_or_rkey = rkey;
  return w;
}

/// ATOMIC_CMP_AND_SWP (compare_add = compare) or ATOMIC_FETCH_AND_ADD
/// (compare_add = addend), as ibv_send_wr.wr.atomic carries them.
inline SendWqe atomic_wr(uint64_t wr_id, WrOpcode op, const std::vector<Sge>& sges,
                         uint64_t remote_addr, uint32_t rkey, uint64_t compare_add,
                         uint64_t swap = 0, uint32_t flags = kSendSignaled) {
  SendWqe w = send_wr(wr_id, op, sges, flags);
  w.remote_addr = remote_addr;
  w.rkey = rkey;
  w.compare_add = compare_add;
  w.swap = swap;
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
  uint8_t max_rd_atomic = 1;       // READs/atomics this QP may have outstanding
  uint8_t max_dest_rd_atomic = 1;  // ... and may serve for its peer
  uint32_t max_send_wr = 256;
  uint32_t max_recv_wr = 256;
  uint32_t cq_capacity = 4096;
  bool sq_sig_all = false;
  Nanos stall_tolerance = 0;  // QpEnv::stall_tolerance: exact IBA timing
};

/// One HCA with one QP and its two CQs; completions are collected as polled.
/// A clock the test moves by hand: the engines' timeouts run in virtual
/// time, as fast as the test can step them, and expire exactly when due.
class ManualClock final : public Clock {
 public:
  Nanos now() const noexcept override { return now_.load(std::memory_order_relaxed); }
  void advance(Nanos d) noexcept { now_.fetch_add(d, std::memory_order_relaxed); }
  template <class Rep, class Period>
  void advance(std::chrono::duration<Rep, Period> d) noexcept {
    advance(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  }

 private:
  std::atomic<Nanos> now_{Nanos{1'000'000'000}};  // not 0: the engine reads 0 as "no timer"
};

struct Endpoint {
  Endpoint(FakeLink& link, uint16_t lid, uint64_t guid, uint32_t qpn, const ConnectParams& p,
           const Clock& clock = steady_clock())
      : ports(lid, guid),
        engine(&link, &ports, nullptr, &link, lid),
        send_cq(p.cq_capacity, [this] { ++send_events; }),
        recv_cq(p.cq_capacity, [this] { ++recv_events; }) {
    link.attach(lid, &engine);
    link.attach_context(lid, &engine);
    engine.set_stall_tolerance(p.stall_tolerance);
    engine.set_clock(&clock);
    qp = create_qp(qpn, p);
  }

  /// Another QP on this HCA, in RESET, sharing the endpoint's CQs.
  std::shared_ptr<Qp> create_qp(uint32_t qpn, const ConnectParams& p) {
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
    return engine.create_qp(init, [this](uint32_t, QpEvent e) { events.push_back(e); });
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
  int send_events = 0, recv_events = 0;  // CQ notifications
};

/// Connects `qp` to (dlid, dest_qpn) with realistic RC/UC attributes.
inline void connect_qp(Qp& qp, const ConnectParams& p, uint16_t dlid, uint32_t dest_qpn,
                       uint32_t rq_psn, uint32_t sq_psn, uint32_t access) {
  QpAttr at;
  at.qp_state = QpState::kInit;
  at.pkey_index = 0;
  at.port_num = 1;
  at.qp_access_flags = access;
  ASSERT_EQ(qp.modify(at, init_mask(p.type)), 0);
  at.qp_state = QpState::kRtr;
  at.ah.dlid = dlid;
  at.ah.port_num = 1;
  at.path_mtu = p.path_mtu;
  at.dest_qp_num = dest_qpn;
  at.rq_psn = rq_psn;
  at.max_dest_rd_atomic = p.max_dest_rd_atomic;
  at.min_rnr_timer = p.min_rnr_timer;
  ASSERT_EQ(qp.modify(at, rtr_mask(p.type)), 0);
  at.qp_state = QpState::kRts;
  at.sq_psn = sq_psn;
  at.timeout = p.timeout;
  at.retry_cnt = p.retry_cnt;
  at.rnr_retry = p.rnr_retry;
  at.max_rd_atomic = p.max_rd_atomic;
  ASSERT_EQ(qp.modify(at, rts_mask(p.type)), 0);
  ASSERT_EQ(qp.state(), QpState::kRts);
}

/// Connects `e`'s QP to (dlid, dest_qpn) with realistic RC/UC attributes.
inline void connect_qp(Endpoint& e, const ConnectParams& p, uint16_t dlid, uint32_t dest_qpn,
                       uint32_t rq_psn, uint32_t sq_psn, uint32_t access) {
  connect_qp(*e.qp, p, dlid, dest_qpn, rq_psn, sq_psn, access);
}

/// Two HCAs on one fake link with an RC (or UC) connection between them.
class EnginePair {
 public:
  explicit EnginePair(const ConnectParams& p = {})
      : params(p),
        a(link, kLidA, kGuidA, kQpnA, p, clock),
        b(link, kLidB, kGuidB, kQpnB, p, clock) {
    connect_qp(a, p, kLidB, kQpnB, p.sq_psn_b, p.sq_psn_a, p.access_a);
    connect_qp(b, p, kLidA, kQpnA, p.sq_psn_a, p.sq_psn_b, p.access_b);
  }

  /// Delivers packets, runs the engines' timers and polls the CQs, moving
  /// the clock kStep at a time, until `done` holds or `limit` of virtual
  /// time passes. Returns whether `done` held.
  bool run_until(const std::function<bool()>& done,
                 std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const Nanos deadline = clock.now() + std::chrono::nanoseconds(limit).count();
    for (;;) {
      step();
      if (done()) return true;
      if (clock.now() > deadline) return false;
      clock.advance(kStep);
    }
  }
  static constexpr Nanos kStep = 20'000;
  /// Keeps the link and the timers going for `d` (to see that nothing else happens).
  void run_for(std::chrono::milliseconds d) {
    run_until([] { return false; }, d);
  }
  void step() {
    link.deliver_all();
    for (Endpoint* e : endpoints()) e->engine.run_timers(clock.now());
    link.deliver_all();
    for (Endpoint* e : endpoints()) e->poll();
  }

  uint32_t mtu() const { return 128u << params.path_mtu; }

  /// Request packets `from` has transmitted so far (first sends and resends).
  std::vector<WirePacket> requests_from(uint16_t lid) const {
    std::vector<WirePacket> out;
    for (const WirePacket& p : link.log())
      if (p.slid() == lid && p.is_request()) out.push_back(p);
    return out;
  }
  /// ACK/NAK packets `from` has transmitted so far.
  std::vector<WirePacket> acks_from(uint16_t lid) const {
    std::vector<WirePacket> out;
    for (const WirePacket& p : link.log())
      if (p.slid() == lid && p.is_ack()) out.push_back(p);
    return out;
  }

  ConnectParams params;
  FakeLink link;
  ManualClock clock;  // before a and b, whose engines read it
  Endpoint a, b;
  std::vector<Endpoint*> extra;  // more HCAs on the same link, stepped too

 private:
  std::vector<Endpoint*> endpoints() {
    std::vector<Endpoint*> all{&a, &b};
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  }
};

// --- messages laid out for a transfer ---

inline constexpr uint32_t kLocal = kAccessLocalWrite;
inline constexpr uint32_t kRemote = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
inline constexpr uint8_t kGuard = 0xee;
inline constexpr size_t kGap = 13;  // guard bytes between and around SGEs

/// Splits `len` bytes into at most `parts` uneven, non-empty pieces.
inline std::vector<uint32_t> split(size_t len, int parts) {
  std::vector<uint32_t> sizes;
  size_t left = len;
  for (int i = parts; i > 0 && left; --i) {
    size_t n = i == 1 ? left : std::max<size_t>(1, left * 2 / (i + 2));
    sizes.push_back(static_cast<uint32_t>(n));
    left -= n;
  }
  return sizes;
}

/// One message laid out in several SGEs on the sender and on the receiver,
/// with guard bytes between and around them, in its own registered regions.
struct Message {
  Message(Endpoint& from, Endpoint& to, size_t len, uint32_t seed, int send_parts = 3,
          int recv_parts = 4, size_t recv_slack = 64)
      : data(pattern(len, seed)) {
    src = register_region(from.engine, len + kGap * (send_parts + 1), kLocal, kGuard);
    dst = register_region(to.engine, len + recv_slack + kGap * (recv_parts + 1), kRemote, kGuard);
    size_t off = kGap, pos = 0;
    for (uint32_t n : split(len, send_parts)) {
      std::copy_n(data.begin() + pos, n, src.bytes.begin() + off);
      send_sges.push_back(src.sge(off, n));
      off += n + kGap;
      pos += n;
    }
    off = kGap;
    for (uint32_t n : split(len + recv_slack, recv_parts)) {
      recv_sges.push_back(dst.sge(off, n));
      off += n + kGap;
    }
  }

  /// The first `data.size()` bytes of the receive SGEs hold the message; no
  /// other byte of the receive region was written.
  void expect_delivered() const {
    std::vector<uint8_t> want(dst.bytes.size(), kGuard);
    size_t pos = 0;
    for (const Sge& s : recv_sges)
      for (uint32_t i = 0; i < s.length && pos < data.size(); ++i)
        want[s.addr - dst.addr() + i] = data[pos++];
    EXPECT_TRUE(want == dst.bytes) << "receive region differs from the message";
  }
  void expect_untouched() const {
    EXPECT_TRUE(
        std::all_of(dst.bytes.begin(), dst.bytes.end(), [](uint8_t b) { return b == kGuard; }));
  }

  std::vector<uint8_t> data;
  Region src, dst;
  std::vector<Sge> send_sges, recv_sges;
};

/// A registered target for RDMA WRITEs on the responder.
struct Target {
  Target(Endpoint& owner, size_t len, uint32_t access = kRemote)
      : region(register_region(owner.engine, len + 2 * kGap, access, kGuard)) {}
  uint64_t va() const { return region.addr(kGap); }
  uint32_t rkey() const { return region.key; }
  void expect_holds(const std::vector<uint8_t>& data) const {
    std::vector<uint8_t> want(region.bytes.size(), kGuard);
    std::copy(data.begin(), data.end(), want.begin() + kGap);
    EXPECT_TRUE(want == region.bytes) << "RDMA WRITE target differs";
  }
  void expect_untouched() const {
    EXPECT_TRUE(std::all_of(region.bytes.begin(), region.bytes.end(),
                            [](uint8_t b) { return b == kGuard; }));
  }
  Region region;
};

inline std::vector<uint64_t> ids(const std::vector<Completion>& wcs) {
  std::vector<uint64_t> out;
  for (const Completion& c : wcs) out.push_back(c.wr_id);
  return out;
}

inline void expect_all(const std::vector<Completion>& wcs, WcStatus s) {
  for (const Completion& c : wcs) EXPECT_EQ(c.status, s) << "wr_id " << c.wr_id;
}

/// How many packets the port with `lid` put on the link: more than a
/// transfer needs means something was sent twice.
inline size_t packets_from(const EnginePair& pair, uint16_t lid) {
  size_t n = 0;
  for (const WirePacket& p : pair.link.log()) n += p.slid() == lid;
  return n;
}

/// The message sizes parameterized transfer tests walk through, by index:
/// 0 B, 1 B, MTU-1, MTU, MTU+1 and 1 MiB.
inline size_t size_for(uint32_t mtu, int kind) {
  switch (kind) {
    case 0:
      return 0;
    case 1:
      return 1;
    case 2:
      return mtu - 1;
    case 3:
      return mtu;
    case 4:
      return mtu + 1;
    default:
      return 1 << 20;
  }
}

}  // namespace ibemu::engine::testing
