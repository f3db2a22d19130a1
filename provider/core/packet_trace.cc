#include "provider/core/packet_trace.h"

#include <fmt/format.h>

#include "provider/core/diagnostics.h"
#include "transport/wire/packet.h"

namespace ibemu::provider {

std::string packet_trace_line(std::string_view event, const uint8_t* packet, size_t len,
                              std::string_view note) {
  std::string line(event);
  wire::PacketView view;
  // Links inside a host carry no CRCs (ShmLink::wants_crcs), so none are checked.
  const wire::ParseError err = wire::parse_packet(packet, len, &view, /*verify_crcs=*/false);
  if (err == wire::ParseError::kOk) {
    line += ' ';
    line += wire::describe_packet(view);
  } else {
    line += fmt::format(" MALFORMED({}) len={}", wire::to_string(err), len);
  }
  if (!note.empty()) line += fmt::format(" ({})", note);
  return line;
}

void trace_packet(std::string_view event, const uint8_t* packet, size_t len,
                  std::string_view note) noexcept {
  try {
    diagnostics::write_tagged_line(diagnostics::kPackets,
                                   packet_trace_line(event, packet, len, note));
  } catch (...) {
    // Out of memory while formatting: the trace loses a line, the program
    // goes on.
  }
}

engine::TxResult TracingPacketSink::transmit(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet,
                                             size_t len) noexcept {
  trace_packet("tx", packet, len);
  const engine::TxResult result = link_->transmit(dlid, dest_qp, packet, len);
  if (result == engine::TxResult::kNoRoute)
    trace_packet("drop", packet, len, "undeliverable: no receiver at this DLID and QPN");
  return result;
}

}  // namespace ibemu::provider
