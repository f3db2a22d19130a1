#pragma once
// The DC target's responder contexts, one per DCI connection (dc_target.cc):
// held by a DCT only. It loads a connection's context into the responder
// before the responder sees a packet, and stores it back when another DCI's
// packet comes.
#include <cstdint>
#include <unordered_map>

#include "transport/engine/qp_core.h"
#include "transport/engine/responder.h"

namespace ibemu::engine {

class DcTarget {
 public:
  DcTarget(QpCore& qp, Responder& responder);
  void receive(const wire::PacketView& pkt) noexcept;
  /// Whether a connection's context is in the responder (an error closes it).
  bool loaded() const noexcept { return loaded_; }
  void close_connection() noexcept;
  /// The connection loaded now (invalid: none), for responses queued to it.
  DcConnectionId loaded_id() const noexcept;
  /// Loads a connection again to send what was queued for it; false when
  /// it has since closed or been replaced by a newer one.
  bool reload(const DcConnectionId& id) noexcept;
  /// Back to `id` after reloads (none loaded when it is invalid or gone).
  void restore(const DcConnectionId& id) noexcept;
  /// RESET: every connection is gone.
  void forget_connections() noexcept;

 private:
  bool load_connection(const wire::PacketView& pkt) noexcept;
  void store_connection() noexcept;
  AddressVector path_to(const wire::PacketView& pkt) const noexcept;

  QpCore& qp_;
  Responder& responder_;
  // A responder context per DCI, by source LID and DCI number; the
  // responder and the QP's peer hold the loaded one.
  struct DcConnection {
    uint32_t connection = 0;
    bool closed = false;  // ended by an error: its packets are dropped
    Nanos last_used = 0;
    ResponderContext resp;
    QpPeer peer;
  };
  void swap_in(uint64_t source, const DcConnection& c) noexcept;

  std::unordered_map<uint64_t, DcConnection> connections_;
  bool loaded_ = false;
  uint64_t loaded_source_ = 0;
};

}  // namespace ibemu::engine
