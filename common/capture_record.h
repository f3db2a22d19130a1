#pragma once
// What a provider sends to the daemon's capture socket for each packet it
// transmits while a capture runs (StatePage::capture_sessions non-zero): this
// header, then the packet as it went on the link. One datagram per packet.
#include <cstdint>

namespace ibemu {

struct CaptureRecordHeader {
  static constexpr uint32_t kMagic = 0x49424350;  // "IBCP"
  uint32_t magic = kMagic;
  uint32_t length = 0;   // packet bytes after this header
  uint64_t time_ns = 0;  // CLOCK_REALTIME when it was sent
  uint16_t device = 0;   // the sending port
  uint8_t port = 0;
  uint8_t reserved = 0;
  uint32_t src_qpn = 0;  // the QP that sent it (BTH carries only the destination's)
};
static_assert(sizeof(CaptureRecordHeader) == 24);

/// The capture socket in a runtime directory.
inline constexpr const char* kCaptureSocketName = "capture.sock";

}  // namespace ibemu
