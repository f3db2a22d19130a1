#include "transport/wire/packet.h"

#include <cstring>

namespace ibemu::wire {
namespace {

constexpr size_t kBthOffsetLocal = Lrh::kSize;
constexpr size_t kBthOffsetGlobal = Lrh::kSize + Grh::kSize;

template <typename H>
void put_ext(uint8_t* ext_base, uint8_t off, const H& h) noexcept {
  if (off != kNoHeader) h.to(ext_base + off);
}

}  // namespace

size_t write_headers(uint8_t* out, const PacketHeaders& h) noexcept {
  Lrh lrh = h.lrh;
  lrh.set_lnh(h.has_grh ? kLnhIbaGlobal : kLnhIbaLocal);
  lrh.to(out);
  size_t off = Lrh::kSize;
  if (h.has_grh) {
    Grh grh = h.grh;
    grh.set_ip_ver(kGrhIpVer);
    grh.set_next_hdr(kGrhNextHdrIba);
    grh.to(out + off);
    off += Grh::kSize;
  }
  h.bth.to(out + off);
  off += Bth::kSize;

  const OpcodeInfo& info = opcode_info(h.bth.opcode());
  uint8_t* ext = out + off;
  put_ext(ext, info.xrceth_off, h.xrceth);
  put_ext(ext, info.dceth_off, h.dceth);
  put_ext(ext, info.deth_off, h.deth);
  put_ext(ext, info.reth_off, h.reth);
  put_ext(ext, info.atomic_eth_off, h.atomic_eth);
  put_ext(ext, info.aeth_off, h.aeth);
  put_ext(ext, info.atomic_ack_eth_off, h.atomic_ack_eth);
  put_ext(ext, info.immdt_off, h.immdt);
  put_ext(ext, info.ieth_off, h.ieth);
  return off + info.ext_len;
}

size_t finalize_packet(uint8_t* out, size_t header_len, size_t payload_len,
                       bool compute_crcs) noexcept {
  const bool has_grh = Lrh::from(out).lnh() == kLnhIbaGlobal;
  const size_t bth_off = has_grh ? kBthOffsetGlobal : kBthOffsetLocal;

  // IBA 9.2: the payload is padded to a multiple of four bytes; pad bytes are zero.
  const size_t pad = (4 - (payload_len & 3)) & 3;
  std::memset(out + header_len + payload_len, 0, pad);
  Bth bth = Bth::from(out + bth_off);
  bth.set_pad_cnt(static_cast<uint8_t>(pad));
  bth.to(out + bth_off);

  const size_t icrc_off = header_len + payload_len + pad;
  const size_t vcrc_off = icrc_off + kIcrcSize;
  Lrh lrh = Lrh::from(out);
  lrh.set_pkt_len(static_cast<uint16_t>(vcrc_off / 4));  // IBA 7.7: LRH through ICRC, in words
  lrh.to(out);
  if (has_grh) {
    Grh grh = Grh::from(out + Lrh::kSize);
    grh.set_pay_len(static_cast<uint16_t>(vcrc_off - kBthOffsetGlobal));  // IBA 8.3
    grh.to(out + Lrh::kSize);
  }

  if (compute_crcs) {
    store_icrc(out + icrc_off, compute_icrc(out, icrc_off, has_grh));
    store_vcrc(out + vcrc_off, compute_vcrc(out, vcrc_off));
  } else {
    std::memset(out + icrc_off, 0, kIcrcSize + kVcrcSize);
  }
  return vcrc_off + kVcrcSize;
}

void fill_crcs(uint8_t* packet, size_t len) noexcept {
  if (len < Lrh::kSize + kIcrcSize + kVcrcSize) return;
  const bool has_grh = Lrh::from(packet).lnh() == kLnhIbaGlobal;
  const size_t icrc_off = len - kIcrcSize - kVcrcSize;
  store_icrc(packet + icrc_off, compute_icrc(packet, icrc_off, has_grh));
  store_vcrc(packet + icrc_off + kIcrcSize, compute_vcrc(packet, icrc_off + kIcrcSize));
}

ParseError parse_packet(const uint8_t* data, size_t len, PacketView* out,
                        bool verify_crcs) noexcept {
  PacketView scratch;  // lets a caller validate without keeping the view
  if (out == nullptr) out = &scratch;
  *out = PacketView{};
  if (data == nullptr || len < Lrh::kSize) return ParseError::kTooShort;

  // Everything below is located through PktLen, so it is checked first.
  const Lrh lrh = Lrh::from(data);
  const size_t vcrc_off = size_t{lrh.pkt_len()} * 4;
  const size_t wire_len = vcrc_off + kVcrcSize;
  if (len < wire_len) return ParseError::kTooShort;
  if (len > wire_len) return ParseError::kBadLength;
  if (vcrc_off < Lrh::kSize + Bth::kSize + kIcrcSize) return ParseError::kBadLength;

  // IBA 7.8.2: the link layer checks the VCRC before looking at anything else.
  if (verify_crcs && compute_vcrc(data, vcrc_off) != load_vcrc(data + vcrc_off)) {
    return ParseError::kBadVcrc;
  }
  const uint8_t lnh = lrh.lnh();
  if (lnh != kLnhIbaLocal && lnh != kLnhIbaGlobal) return ParseError::kBadLnh;
  const bool has_grh = lnh == kLnhIbaGlobal;
  const size_t bth_off = has_grh ? kBthOffsetGlobal : kBthOffsetLocal;
  if (vcrc_off < bth_off + Bth::kSize + kIcrcSize) return ParseError::kBadLength;

  const size_t icrc_off = vcrc_off - kIcrcSize;
  if (verify_crcs && compute_icrc(data, icrc_off, has_grh) != load_icrc(data + icrc_off)) {
    return ParseError::kBadIcrc;
  }

  if (lrh.lver() != 0) return ParseError::kBadVersion;
  if (has_grh) {
    const Grh grh = Grh::from(data + Lrh::kSize);
    if (grh.ip_ver() != kGrhIpVer) return ParseError::kBadVersion;
    if (grh.next_hdr() != kGrhNextHdrIba) return ParseError::kBadLnh;
    if (grh.pay_len() != vcrc_off - kBthOffsetGlobal) return ParseError::kBadLength;
  }

  const Bth bth = Bth::from(data + bth_off);
  if (bth.tver() != 0) return ParseError::kBadVersion;
  const OpcodeInfo& info = opcode_info(bth.opcode());
  if (!info.valid) return ParseError::kBadOpcode;

  const size_t header_len = bth_off + Bth::kSize + info.ext_len;
  if (header_len > icrc_off) return ParseError::kBadLength;
  const size_t body = icrc_off - header_len;  // payload + pad
  const size_t pad = bth.pad_cnt();
  if (!(info.flags & kHasPayload)) {
    if (body != 0) return ParseError::kBadLength;
    if (pad != 0) return ParseError::kBadPad;
  } else if (pad > body) {
    return ParseError::kBadPad;
  }
  const size_t payload_len = body - pad;
  if (payload_len > kMaxPayload) return ParseError::kPayloadTooLong;

  out->data = data;
  out->len = len;
  out->info = &info;
  out->has_grh = has_grh;
  out->header_len = header_len;
  out->payload_len = payload_len;
  return ParseError::kOk;
}

const char* to_string(ParseError e) noexcept {
  switch (e) {
    case ParseError::kOk:
      return "OK";
    case ParseError::kTooShort:
      return "TOO_SHORT";
    case ParseError::kBadLnh:
      return "BAD_LNH";
    case ParseError::kBadLength:
      return "BAD_LENGTH";
    case ParseError::kBadOpcode:
      return "BAD_OPCODE";
    case ParseError::kBadPad:
      return "BAD_PAD";
    case ParseError::kPayloadTooLong:
      return "PAYLOAD_TOO_LONG";
    case ParseError::kBadIcrc:
      return "BAD_ICRC";
    case ParseError::kBadVcrc:
      return "BAD_VCRC";
    case ParseError::kBadVersion:
      return "BAD_VERSION";
  }
  return "UNKNOWN";
}

}  // namespace ibemu::wire
