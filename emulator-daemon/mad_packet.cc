#include "emulator-daemon/mad_packet.h"

#include <cstring>

#include "transport/wire/packet.h"

namespace ibemu {

namespace {
constexpr uint32_t kQp1Qkey = 0x80010000;  // IBA 13.5.1: QP1's well-known Q_Key
constexpr size_t kMadSize = 256;
}  // namespace

std::vector<uint8_t> build_mad_packet(const MadPacketFields& f, const uint8_t* mad, size_t len) {
  wire::PacketHeaders h;
  h.lrh.set_vl(f.dest_qp == 0 ? 15 : 0);  // IBA 7.6.5: SMPs travel on VL15
  h.lrh.set_dlid(f.dlid);
  h.lrh.set_slid(f.slid);
  h.bth.set_opcode(static_cast<uint8_t>(wire::Opcode::kUdSendOnly));
  h.bth.set_pkey(0xffff);
  h.bth.set_dest_qp(f.dest_qp);
  h.deth.set_qkey(f.dest_qp == 1 ? kQp1Qkey : 0);
  h.deth.set_src_qp(f.src_qp);
  std::vector<uint8_t> packet(wire::kMaxPacket);
  len = std::min(len, kMadSize);
  const size_t hlen = wire::write_headers(packet.data(), h);
  std::memcpy(packet.data() + hlen, mad, len);
  packet.resize(wire::finalize_packet(packet.data(), hlen, len, true));
  return packet;
}

std::optional<ParsedMadPacket> parse_mad_packet(const uint8_t* packet, size_t len) {
  wire::PacketView v;
  if (wire::parse_packet(packet, len, &v, false) != wire::ParseError::kOk) return std::nullopt;
  if (v.opcode() != static_cast<uint8_t>(wire::Opcode::kUdSendOnly)) return std::nullopt;
  const uint32_t dqp = v.bth().dest_qp();
  if (dqp > 1 || v.payload_len != kMadSize) return std::nullopt;
  ParsedMadPacket p;
  p.fields = {v.lrh().slid(), v.lrh().dlid(), v.deth().src_qp(), dqp};
  p.mad = v.payload();
  p.len = v.payload_len;
  return p;
}

}  // namespace ibemu
