#pragma once
// The provider's link to other HCA contexts on this host: packets for
// (DLID, QPN) go into the inbox ring of the process that owns that QP, and
// messages between contexts of one HCA (transport/engine/context_link.h) into
// the inbox of the context that owns an XRC SRQ or of a context by its daemon
// session. The daemon says which inbox that is; answers are cached.
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "common/control_channel.h"
#include "provider/core/capture_mirror.h"
#include "provider/core/link_faults.h"
#include "transport/engine/context_link.h"
#include "transport/engine/packet_sink.h"
#include "transport/link/shm_ring.h"

namespace ibemu::provider {

class ShmLink : public engine::PacketSink, public engine::ContextLink {
 public:
  /// `device`: the daemon's index of the HCA (XRC SRQ numbers are per HCA).
  ShmLink(ControlClient* daemon, int device) : daemon_(daemon), device_(device) {}

  bool transmit(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet,
                size_t len) noexcept override;
  bool wants_crcs() const noexcept override { return false; }
  /// Copies every packet sent to `ibemu capture` while one runs.
  void attach_capture(std::unique_ptr<CaptureMirror> mirror) { capture_ = std::move(mirror); }
  /// A bound on how long one packet may wait for room in a full ring (by
  /// default none: it waits while the consumer drains). A sender that others
  /// depend on, such as the daemon's one thread for another host's packets,
  /// sets one.
  void set_wait_limit(std::chrono::nanoseconds limit) { wait_limit_ = limit; }
  /// Forgets every cached route and ring whenever `inboxes_closed` (the
  /// state page's count of departed inboxes) changes, so that a departed
  /// program's ring is unmapped rather than kept for good. Live
  /// destinations are asked for again on their next packet.
  void forget_routes_on(const std::atomic<uint64_t>* inboxes_closed) {
    inboxes_closed_ = inboxes_closed;
    inboxes_closed_seen_ = inboxes_closed->load(std::memory_order_acquire);
  }
  /// Passes packets through the faults of the links they cross while any is impaired.
  void attach_faults(std::unique_ptr<LinkFaults> faults) { faults_ = std::move(faults); }
  /// Sends the packets faults held back whose time has come; when the next is
  /// due (0: none).
  int64_t release_held(int64_t now_ns) noexcept;

  engine::Delivery to_srq_owner(uint32_t srqn, const uint8_t* msg, size_t len) noexcept override;
  engine::Delivery to_context(uint64_t context, const uint8_t* msg, size_t len) noexcept override;
  bool srq_owner_alive(uint32_t srqn) noexcept override;

 private:
  std::chrono::nanoseconds wait_limit_{0};
  struct Route {
    std::shared_ptr<link::ShmRing> ring;  // null: destination unknown (drop)
    std::chrono::steady_clock::time_point expires;
  };
  struct Group {
    std::vector<std::shared_ptr<link::ShmRing>> rings;  // one per member process
    std::chrono::steady_clock::time_point expires;
  };
  std::shared_ptr<link::ShmRing> resolve(uint16_t dlid, uint32_t dest_qp) noexcept;
  std::vector<std::shared_ptr<link::ShmRing>> resolve_group(uint16_t mlid) noexcept;
  /// The ring of daemon session `owner`, attached from `fd` unless known; takes fd.
  std::shared_ptr<link::ShmRing> ring_of(uint64_t owner, int fd) noexcept;
  bool push(link::ShmRing& ring, const uint8_t* packet, size_t len,
            link::SlotKind kind = link::SlotKind::kPacket) noexcept;
  /// Asks the daemon `request` (resolve_srq, resolve_session); the owner's
  /// ring, or null.
  std::shared_ptr<link::ShmRing> ask(const Json& request, uint64_t* owner) noexcept;
  /// A message into `ring`; a full ring of a context that is gone is no route.
  engine::Delivery deliver(const std::shared_ptr<link::ShmRing>& ring, uint64_t owner,
                           const uint8_t* msg, size_t len) noexcept;
  bool session_alive(uint64_t session) noexcept;
  /// Under mutex_: drops the caches if an inbox closed since last time.
  void forget_departed_locked() noexcept;

  ControlClient* daemon_;
  const int device_;
  std::unique_ptr<CaptureMirror> capture_;
  std::unique_ptr<LinkFaults> faults_;
  /// Puts a packet on the wire: into the destination's inbox (inboxes).
  bool deliver_packet(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet, size_t len) noexcept;
  LinkFaults::Send send_fn() {
    return [this](uint16_t dlid, uint32_t qp, const uint8_t* p, size_t n) {
      return deliver_packet(dlid, qp, p, n);
    };
  }
  std::mutex mutex_;
  std::map<uint64_t, Route> routes_;                           // (dlid << 24 | qpn)
  std::map<uint16_t, Group> groups_;                           // by MLID
  std::map<uint64_t, std::weak_ptr<link::ShmRing>> by_owner_;  // daemon session → ring
  struct Owner {
    uint64_t session = 0;
    std::shared_ptr<link::ShmRing> ring;
  };
  std::map<uint32_t, Owner> srq_owners_;                         // XRC SRQ number → owner
  std::map<uint64_t, std::shared_ptr<link::ShmRing>> contexts_;  // contexts messages went to
  const std::atomic<uint64_t>* inboxes_closed_ = nullptr;
  uint64_t inboxes_closed_seen_ = 0;  // under mutex_
};

}  // namespace ibemu::provider
