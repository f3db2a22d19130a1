#pragma once
// IBEMU_TRACE=packets: one line per packet this context's HCA sends ("tx"),
// receives ("rx") or loses on the way ("drop", with the reason), e.g.
//   ibemu packets pid 4242: tx RC_SEND_ONLY dlid=2 slid=1 qpn=0x000011 psn=0x3f2a1c len=4096 ...
// The body is wire::describe_packet's, so a trace reads like `ibemu capture`
// seen through tshark, without the capture.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "transport/engine/packet_sink.h"

namespace ibemu::provider {

/// The trace line of one packet (without the channel's prefix): `event`
/// ("tx", "rx", "drop"), the packet described, then `note` in parentheses
/// if it is not empty. A packet that does not parse is shown by its error.
std::string packet_trace_line(std::string_view event, const uint8_t* packet, size_t len,
                              std::string_view note = {});

/// Writes packet_trace_line to the packets channel. Callers ask
/// diagnostics::on(diagnostics::kPackets) first.
void trace_packet(std::string_view event, const uint8_t* packet, size_t len,
                  std::string_view note = {}) noexcept;

/// Put between the engine and its link while packets are traced: each
/// packet is traced as it leaves, before the link may deliver it (so a
/// process's trace never shows the answer before the question), and again as
/// dropped when the link finds nobody to deliver it to (the link reports
/// the packets it gives up later itself: ShmLink::on_discard). While tracing is off
/// the engine talks to the link directly and this costs nothing.
class TracingPacketSink : public engine::PacketSink {
 public:
  explicit TracingPacketSink(engine::PacketSink* link) : link_(link) {}
  engine::TxResult transmit(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet,
                            size_t len) noexcept override;
  bool wants_crcs() const noexcept override { return link_->wants_crcs(); }

 private:
  engine::PacketSink* link_;
};

}  // namespace ibemu::provider
