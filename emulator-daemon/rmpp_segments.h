#pragma once
// RMPP (IBA 13.6) between hosts. On one host a MAD longer than 256 bytes —
// an SA table — is handed over whole, as the receiving MAD layer hands over
// a reassembled transfer. Between hosts it must travel as 256-byte
// segments: each repeats the class's headers (for the SA: MAD, RMPP and SA
// headers, 56 bytes) and carries the next part of the data, with RMPP DATA
// segment numbers, First/Last flags and the payload lengths Linux's MAD
// layer uses. The receiving daemon reassembles them. There are no RMPP ACKs
// between daemons: a lost segment loses the transfer, and the requester's
// MAD timeout and retries recover, as for any lost MAD.
#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace ibemu {

using MadSegment = std::array<uint8_t, 256>;

/// Whether a MAD of `len` bytes is an RMPP transfer too long for one packet.
bool needs_rmpp_segments(const uint8_t* mad, size_t len);
/// The DATA segments of a long RMPP MAD.
std::vector<MadSegment> rmpp_segments(const uint8_t* mad, size_t len);

/// Collects segments that arrive from another host.
class RmppReassembly {
 public:
  using Clock = std::chrono::steady_clock;
  /// Whether a received MAD is an RMPP DATA segment of a longer transfer
  /// (not a whole single-segment one).
  static bool is_partial_segment(const uint8_t* mad, size_t len);
  /// Adds a segment from `slid`; the whole MAD once its last segment came.
  /// Segments out of order or of an unknown transfer drop the transfer.
  std::optional<std::vector<uint8_t>> add(uint16_t slid, const uint8_t* seg, size_t len,
                                          Clock::time_point now);

 private:
  struct Transfer {
    std::vector<uint8_t> mad;  // headers of the first segment, then data
    uint32_t next_segment = 1;
    Clock::time_point started;
  };
  std::map<std::pair<uint16_t, uint64_t>, Transfer> transfers_;  // (SLID, TID)
};

}  // namespace ibemu
