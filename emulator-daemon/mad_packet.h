#pragma once
// A MAD as the packet that carries it on the wire (IBA 13.4): LRH, BTH
// (UD SEND only), DETH with QP0's or QP1's Q_Key, the MAD, ICRC and VCRC.
// SMPs travel on VL15. Captures show MADs this way, and daemons of
// different hosts exchange them this way.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace ibemu {

struct MadPacketFields {
  uint16_t slid = 0;
  uint16_t dlid = 0;
  uint32_t src_qp = 0;   // 0 or 1
  uint32_t dest_qp = 0;  // 0 or 1
};

/// The packet; `len` is at most 256 (one MAD, no RMPP segments).
std::vector<uint8_t> build_mad_packet(const MadPacketFields& f, const uint8_t* mad, size_t len);

/// The fields and the MAD of a packet to QP0 or QP1; nullopt for anything else.
struct ParsedMadPacket {
  MadPacketFields fields;
  const uint8_t* mad = nullptr;
  size_t len = 0;
};
std::optional<ParsedMadPacket> parse_mad_packet(const uint8_t* packet, size_t len);

}  // namespace ibemu
