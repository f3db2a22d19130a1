#pragma once
// The provider's link to other HCA contexts on this host: packets for
// (DLID, QPN) go into the inbox ring of the process that owns that QP, and
// messages between contexts of one HCA (transport/engine/context_link.h) into
// the inbox of the context that owns an XRC SRQ or of a context by its daemon
// session. The daemon says which inbox that is; answers are cached.
//
// The link is lossless: a ring without room gets its packets later, in
// order (link/ring_sender.h); nothing here waits for room. Whoever drains
// this context's own inbox also calls flush_queued().
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "common/control_channel.h"
#include "provider/core/capture_mirror.h"
#include "provider/core/link_faults.h"
#include "transport/engine/context_link.h"
#include "transport/engine/packet_sink.h"
#include "transport/link/ring_sender.h"

namespace ibemu::provider {

class ShmLink : public engine::PacketSink, public engine::ContextLink {
 public:
  /// `device`: the daemon's index of the HCA (XRC SRQ numbers are per HCA).
  ShmLink(ControlClient* daemon, int device) : daemon_(daemon), device_(device) {}

  engine::TxResult transmit(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet,
                            size_t len) noexcept override;
  bool wants_crcs() const noexcept override { return false; }
  /// Finds the route to (dlid, dest_qp) ahead of its first packet (a QP
  /// that got its destination), so no packet waits for the daemon.
  void prepare_route(uint16_t dlid, uint32_t dest_qp) noexcept { resolve(dlid, dest_qp); }
  /// Copies every packet sent to `ibemu capture` while one runs.
  void attach_capture(std::unique_ptr<CaptureMirror> mirror) { capture_ = std::move(mirror); }
  /// Forgets every cached route and ring whenever `inboxes_closed` (the
  /// state page's count of departed inboxes) changes, so that a departed
  /// program's ring is unmapped rather than kept for good. Live
  /// destinations are asked for again on their next packet.
  void forget_routes_on(const std::atomic<uint64_t>* inboxes_closed) {
    inboxes_closed_ = inboxes_closed;
    inboxes_closed_seen_ = inboxes_closed->load(std::memory_order_acquire);
    queued_closed_seen_ = inboxes_closed_seen_;
  }
  /// Passes packets through the faults of the links they cross while any is impaired.
  void attach_faults(std::unique_ptr<LinkFaults> faults) { faults_ = std::move(faults); }
  /// Sends the packets faults held back whose time has come; when the next is
  /// due (0: none).
  int64_t release_held(int64_t now_ns) noexcept;

  /// Why a packet the link had queued was given up.
  enum class Discard {
    kReceiverStalled,  // it took nothing for the head-of-queue lifetime
    kReceiverGone,     // its program left
  };
  using OnDiscard = std::function<void(const uint8_t* packet, size_t len, Discard why)>;
  /// Told of each queued packet given up (only IBA packets, not messages).
  void on_discard(OnDiscard f) { on_discard_ = std::move(f); }
  /// Called when packets start to wait (whoever flushes may be asleep).
  void on_queued(std::function<void()> f) { on_queued_ = std::move(f); }
  /// Moves queued packets into their rings as they have room; gives up on
  /// receivers that left or stalled. Returns how many packets left the
  /// queues. Takes no engine lock and waits for nothing.
  size_t flush_queued(int64_t now_ns) noexcept;
  /// How many bytes may wait for one ring (link::RingSender::kMaxHeldBytes
  /// by default); beyond that a packet is discarded as receiver_stalled.
  /// For packets that come from another host, whose sender nothing here
  /// holds back: queued longer than its ACK timeout, a packet would only be
  /// resent, and the copies would bury the receiver.
  void set_queue_limit(size_t bytes) { queue_limit_ = bytes; }
  /// Whether packets wait for room in some ring.
  bool queuing() const noexcept { return queuing_.load(std::memory_order_relaxed) != 0; }

  engine::Delivery to_srq_owner(uint32_t srqn, const uint8_t* msg, size_t len) noexcept override;
  engine::Delivery to_context(uint64_t context, const uint8_t* msg, size_t len) noexcept override;
  bool srq_owner_alive(uint32_t srqn) noexcept override;

 private:
  using Sender = std::shared_ptr<link::RingSender>;
  struct Route {
    Sender ring;  // null: destination unknown (drop)
    std::chrono::steady_clock::time_point expires;
  };
  struct Group {
    std::vector<Sender> rings;  // one per member process
    std::chrono::steady_clock::time_point expires;
  };
  Sender resolve(uint16_t dlid, uint32_t dest_qp) noexcept;
  std::vector<Sender> resolve_group(uint16_t mlid) noexcept;
  /// The ring of daemon session `owner`, attached from `fd` unless known; takes fd.
  Sender ring_of(uint64_t owner, int fd) noexcept;
  /// Into `ring` now, or queued behind what waits for it.
  engine::TxResult send(const Sender& ring, const uint8_t* packet, size_t len,
                        link::SlotKind kind = link::SlotKind::kPacket) noexcept;
  void note_queued(const Sender& ring) noexcept;
  void discarded(const uint8_t* packet, size_t len, link::SlotKind kind, Discard why) noexcept;
  /// Asks the daemon `request` (resolve_srq, resolve_session); the owner's
  /// ring, or null.
  Sender ask(const Json& request, uint64_t* owner) noexcept;
  /// A message into `ring`.
  engine::Delivery deliver(const Sender& ring, const uint8_t* msg, size_t len) noexcept;
  bool session_alive(uint64_t session) noexcept;
  /// Under mutex_: drops the caches if an inbox closed since last time.
  void forget_departed_locked() noexcept;

  ControlClient* daemon_;
  const int device_;
  std::unique_ptr<CaptureMirror> capture_;
  std::unique_ptr<LinkFaults> faults_;
  OnDiscard on_discard_;
  size_t queue_limit_ = link::RingSender::kMaxHeldBytes;
  std::function<void()> on_queued_;
  /// Puts a packet on the wire: into the destination's inbox (inboxes).
  engine::TxResult deliver_packet(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet,
                                  size_t len) noexcept;
  LinkFaults::Send send_fn() {
    return [this](uint16_t dlid, uint32_t qp, const uint8_t* p, size_t n) {
      return deliver_packet(dlid, qp, p, n);
    };
  }
  std::mutex mutex_;
  std::map<uint64_t, Route> routes_;                              // (dlid << 24 | qpn)
  std::map<uint16_t, Group> groups_;                              // by MLID
  std::map<uint64_t, std::weak_ptr<link::RingSender>> by_owner_;  // daemon session → ring
  struct Owner {
    uint64_t session = 0;
    Sender ring;
  };
  std::map<uint32_t, Owner> srq_owners_;  // XRC SRQ number → owner
  std::map<uint64_t, Sender> contexts_;   // contexts messages went to
  const std::atomic<uint64_t>* inboxes_closed_ = nullptr;
  uint64_t inboxes_closed_seen_ = 0;  // under mutex_
  // The rings packets wait for (they stay alive while anything waits).
  std::mutex queued_mutex_;
  std::vector<Sender> queued_;
  std::atomic<size_t> queuing_{0};
  std::mutex flush_mutex_;           // one flush at a time; others skip
  uint64_t queued_closed_seen_ = 0;  // under flush_mutex_
};

}  // namespace ibemu::provider
