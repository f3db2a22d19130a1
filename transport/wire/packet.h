// Building and parsing whole IBA packets:
//   LRH | GRH? | BTH | extension headers | payload | pad | ICRC | VCRC
// Senders fill a PacketHeaders, call write_headers(), copy the payload after
// the headers and call finalize_packet(). Receivers call parse_packet() and
// look only at the PacketView it returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/wire/aeth.h"
#include "transport/wire/atomic_ack_eth.h"
#include "transport/wire/atomic_eth.h"
#include "transport/wire/bth.h"
#include "transport/wire/crc.h"
#include "transport/wire/dceth.h"
#include "transport/wire/deth.h"
#include "transport/wire/grh.h"
#include "transport/wire/ieth.h"
#include "transport/wire/immdt.h"
#include "transport/wire/lrh.h"
#include "transport/wire/opcode.h"
#include "transport/wire/reth.h"
#include "transport/wire/xrceth.h"

namespace ibemu::wire {

/// Largest payload of one packet: the largest IBA path MTU, 4096 bytes.
inline constexpr size_t kMaxPayload = 4096;
/// LRH + GRH + BTH + the largest extension headers (AtomicETH).
inline constexpr size_t kMaxHeaders = Lrh::kSize + Grh::kSize + Bth::kSize + kMaxExtLen;
inline constexpr size_t kMaxPacket = kMaxHeaders + kMaxPayload + 3 /*pad*/ + kIcrcSize + kVcrcSize;
static_assert(kMaxHeaders == 8 + 40 + 12 + 44);

/// LRH:LNH values (IBA 7.7). Raw packets (0, 1) are not IBA transport packets.
inline constexpr uint8_t kLnhIbaLocal = 2;
inline constexpr uint8_t kLnhIbaGlobal = 3;

/// What a sender fills. Extension headers the opcode does not carry (see
/// opcode_info(bth.opcode()).flags) are ignored.
struct PacketHeaders {
  Lrh lrh;
  bool has_grh = false;
  Grh grh;
  Bth bth;
  Reth reth;
  Aeth aeth;
  AtomicEth atomic_eth;
  AtomicAckEth atomic_ack_eth;
  Deth deth;
  ImmDt immdt;
  Ieth ieth;
  Xrceth xrceth;
  Dceth dceth;
};

/// Writes LRH[, GRH], BTH and the opcode's extension headers at `out` (which
/// must hold kMaxHeaders bytes) and returns the header length; the payload goes
/// right after. Fields fixed by the structure are set here, whatever `h` holds:
/// LRH:LNH from has_grh, GRH:IPVer = 6 and GRH:NxtHdr = 0x1B (IBA 8.3).
/// Length, pad and CRC fields are left to finalize_packet().
size_t write_headers(uint8_t* out, const PacketHeaders& h) noexcept;

/// Completes a packet whose headers were written by write_headers() and whose
/// `payload_len` payload bytes follow them: zeroes the pad, sets BTH:PadCnt,
/// LRH:PktLen, GRH:PayLen (when LNH says a GRH is present), the ICRC and the
/// VCRC. `out` must hold header_len + payload_len + 3 + 6 bytes. Returns the
/// total wire length.
/// With compute_crcs false the ICRC and VCRC fields are zero: for links
/// between processes of one host, where nothing can corrupt a packet and the
/// CRCs would cost more than the copy (captures and the network link fill
/// them in with fill_crcs()).
size_t finalize_packet(uint8_t* out, size_t header_len, size_t payload_len,
                       bool compute_crcs = true) noexcept;
/// Computes the ICRC and VCRC of a finished packet of `len` bytes in place.
void fill_crcs(uint8_t* packet, size_t len) noexcept;

enum class ParseError : uint8_t {
  kOk,
  kTooShort,        // buffer shorter than the headers or than LRH:PktLen says
  kBadLnh,          // LNH not IBA local/global, or GRH:NxtHdr not IBA transport
  kBadLength,       // buffer longer than PktLen, or PktLen/PayLen inconsistent with the opcode
  kBadOpcode,       // opcode not valid in ibemu
  kBadPad,          // PadCnt larger than the payload, or non-zero without payload
  kPayloadTooLong,  // payload above kMaxPayload
  kBadIcrc,
  kBadVcrc,
  kBadVersion,  // LVer, GRH:IPVer or TVer not the one this spec version defines
};

const char* to_string(ParseError e) noexcept;

/// A parsed, validated view over a received buffer; the bytes stay where they
/// are and must outlive the view. Header accessors return a copy, or a zeroed
/// header when the packet does not carry that header.
struct PacketView {
  const uint8_t* data = nullptr;
  size_t len = 0;  // wire length, LRH through VCRC
  const OpcodeInfo* info = nullptr;
  bool has_grh = false;
  size_t header_len = 0;   // LRH through the last extension header
  size_t payload_len = 0;  // without pad

  size_t bth_offset() const noexcept { return has_grh ? Lrh::kSize + Grh::kSize : Lrh::kSize; }
  uint8_t opcode() const noexcept { return data ? data[bth_offset()] : 0; }

  Lrh lrh() const noexcept { return data ? Lrh::from(data) : Lrh{}; }
  Grh grh() const noexcept { return data && has_grh ? Grh::from(data + Lrh::kSize) : Grh{}; }
  Bth bth() const noexcept { return data ? Bth::from(data + bth_offset()) : Bth{}; }
  Reth reth() const noexcept { return ext<Reth>(info ? info->reth_off : kNoHeader); }
  Aeth aeth() const noexcept { return ext<Aeth>(info ? info->aeth_off : kNoHeader); }
  AtomicEth atomic_eth() const noexcept {
    return ext<AtomicEth>(info ? info->atomic_eth_off : kNoHeader);
  }
  AtomicAckEth atomic_ack_eth() const noexcept {
    return ext<AtomicAckEth>(info ? info->atomic_ack_eth_off : kNoHeader);
  }
  Deth deth() const noexcept { return ext<Deth>(info ? info->deth_off : kNoHeader); }
  ImmDt immdt() const noexcept { return ext<ImmDt>(info ? info->immdt_off : kNoHeader); }
  Ieth ieth() const noexcept { return ext<Ieth>(info ? info->ieth_off : kNoHeader); }
  Xrceth xrceth() const noexcept { return ext<Xrceth>(info ? info->xrceth_off : kNoHeader); }
  Dceth dceth() const noexcept { return ext<Dceth>(info ? info->dceth_off : kNoHeader); }
  const uint8_t* payload() const noexcept { return data ? data + header_len : nullptr; }

 private:
  template <typename H>
  H ext(uint8_t off) const noexcept {
    if (!data || off == kNoHeader) return H{};
    return H::from(data + bth_offset() + Bth::kSize + off);
  }
};

/// Validates everything a receiver must check before any QP looks at the
/// packet and that needs no QP state (IBA 7.8, 9.6): LRH:PktLen against the
/// buffer, LNH, LVer/IPVer/TVer, GRH:NxtHdr and PayLen, opcode, header and pad
/// lengths against PktLen, payload <= kMaxPayload, VCRC and ICRC. The CRCs are
/// skipped when `verify_crcs` is false (links that cannot corrupt packets).
/// On success `*out` describes the packet; on failure it is reset to an
/// empty view. `out` may be null to validate only.
ParseError parse_packet(const uint8_t* data, size_t len, PacketView* out,
                        bool verify_crcs = true) noexcept;

/// One line for traces, e.g.
/// "RC_SEND_ONLY dlid=3 slid=1 qpn=0x000012 psn=0x000000 len=64".
std::string describe_packet(const PacketView& v);

}  // namespace ibemu::wire
