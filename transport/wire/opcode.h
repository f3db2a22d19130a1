// The BTH opcode table (IBA 9.2, table "OpCode field"): the single source of
// truth for which headers a packet carries, where they sit and what kind of
// packet it is. Code asks `info.flags & kHasReth` or `info.reth_off` instead of
// switching on opcodes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace ibemu::wire {

/// OpCode bits 7-5 (IBA 9.2). ibemu implements RC, UC, UD, XRC and, in the
/// first manufacturer-specific range, DC (docs/dc.md); RD and CNP decode to
/// their transport but are not valid.
enum class Transport : uint8_t {
  kRc = 0,
  kUc = 1,
  kRd = 2,
  kUd = 3,
  kCnp = 4,  // RoCEv2 congestion notification (IBA Annex A17)
  kXrc = 5,
  kDc = 6,  // manufacturer-specific 110b: ibemu's Dynamically Connected
  kManufacturer7 = 7,
};

enum class Opcode : uint8_t {
  kRcSendFirst = 0x00,
  kRcSendMiddle = 0x01,
  kRcSendLast = 0x02,
  kRcSendLastImm = 0x03,
  kRcSendOnly = 0x04,
  kRcSendOnlyImm = 0x05,
  kRcWriteFirst = 0x06,
  kRcWriteMiddle = 0x07,
  kRcWriteLast = 0x08,
  kRcWriteLastImm = 0x09,
  kRcWriteOnly = 0x0a,
  kRcWriteOnlyImm = 0x0b,
  kRcReadRequest = 0x0c,
  kRcReadResponseFirst = 0x0d,
  kRcReadResponseMiddle = 0x0e,
  kRcReadResponseLast = 0x0f,
  kRcReadResponseOnly = 0x10,
  kRcAcknowledge = 0x11,
  kRcAtomicAcknowledge = 0x12,
  kRcCompareSwap = 0x13,
  kRcFetchAdd = 0x14,
  kRcSendLastInv = 0x16,
  kRcSendOnlyInv = 0x17,
  kUcSendFirst = 0x20,
  kUcSendMiddle = 0x21,
  kUcSendLast = 0x22,
  kUcSendLastImm = 0x23,
  kUcSendOnly = 0x24,
  kUcSendOnlyImm = 0x25,
  kUcWriteFirst = 0x26,
  kUcWriteMiddle = 0x27,
  kUcWriteLast = 0x28,
  kUcWriteLastImm = 0x29,
  kUcWriteOnly = 0x2a,
  kUcWriteOnlyImm = 0x2b,
  kUdSendOnly = 0x64,
  kUdSendOnlyImm = 0x65,
};

enum HeaderFlag : uint32_t {
  kHasReth = 1u << 0,
  kHasAeth = 1u << 1,
  kHasAtomicEth = 1u << 2,
  kHasAtomicAckEth = 1u << 3,
  kHasDeth = 1u << 4,
  kHasImmDt = 1u << 5,
  kHasIeth = 1u << 6,
  kHasPayload = 1u << 7,  // may carry payload (possibly zero bytes)
  kIsFirst = 1u << 8,
  kIsMiddle = 1u << 9,
  kIsLast = 1u << 10,
  kIsOnly = kIsFirst | kIsLast,  // single-packet messages, including requests and ACKs
  kIsSend = 1u << 11,
  kIsWrite = 1u << 12,
  kIsReadRequest = 1u << 13,
  kIsReadResponse = 1u << 14,
  kIsAck = 1u << 15,
  kIsAtomic = 1u << 16,
  kIsAtomicAck = 1u << 17,
  kIsRequest = 1u << 18,   // requester -> responder
  kIsResponse = 1u << 19,  // responder -> requester
  // IBA 9.2: SE may be set only on the last/only packet of a SEND or of an
  // RDMA WRITE with immediate.
  kSolicitedAllowed = 1u << 20,
  kHasXrceth = 1u << 21,  // XRC requests (IBA annex A14)
  kHasDceth = 1u << 22,   // DC requests (dceth.h)
};

/// Offset value for an extension header that the opcode does not carry.
inline constexpr uint8_t kNoHeader = 0xff;

struct OpcodeInfo {
  const char* name;  // e.g. "RC_SEND_ONLY"; "INVALID" for unassigned opcodes
  bool valid;        // ibemu accepts it on receive and may send it
  Transport transport;
  uint32_t flags;   // HeaderFlag bits
  uint8_t ext_len;  // bytes of extension headers between BTH and payload
  // Offsets counted from the first byte after the BTH; kNoHeader when absent.
  uint8_t reth_off;
  uint8_t aeth_off;
  uint8_t atomic_eth_off;
  uint8_t atomic_ack_eth_off;
  uint8_t deth_off;
  uint8_t immdt_off;
  uint8_t ieth_off;
  uint8_t xrceth_off;
  uint8_t dceth_off;

  /// True when every bit of `f` is set (so `has(kIsOnly)` means first and last).
  constexpr bool has(uint32_t f) const noexcept { return (flags & f) == f; }
};

namespace detail {

// Message shapes shared by RC, UC and UD (IBA 9.2, table "OpCode field", and
// 9.3 for which extension headers each carries).
inline constexpr uint32_t kSendFirst = kIsSend | kIsRequest | kIsFirst | kHasPayload;
inline constexpr uint32_t kSendMiddle = kIsSend | kIsRequest | kIsMiddle | kHasPayload;
inline constexpr uint32_t kSendLast =
    kIsSend | kIsRequest | kIsLast | kHasPayload | kSolicitedAllowed;
inline constexpr uint32_t kSendOnly =
    kIsSend | kIsRequest | kIsOnly | kHasPayload | kSolicitedAllowed;
inline constexpr uint32_t kWriteFirst = kIsWrite | kIsRequest | kIsFirst | kHasReth | kHasPayload;
inline constexpr uint32_t kWriteMiddle = kIsWrite | kIsRequest | kIsMiddle | kHasPayload;
inline constexpr uint32_t kWriteLast = kIsWrite | kIsRequest | kIsLast | kHasPayload;
inline constexpr uint32_t kWriteOnly = kIsWrite | kIsRequest | kIsOnly | kHasReth | kHasPayload;
inline constexpr uint32_t kWithImm = kHasImmDt | kSolicitedAllowed;
inline constexpr uint32_t kReadRequest = kIsReadRequest | kIsRequest | kIsOnly | kHasReth;
inline constexpr uint32_t kReadResponse = kIsReadResponse | kIsResponse | kHasPayload;
inline constexpr uint32_t kAtomic = kIsAtomic | kIsRequest | kIsOnly | kHasAtomicEth;

struct OpcodeSpec {
  uint8_t op;
  const char* name;
  uint32_t flags;
};

inline constexpr OpcodeSpec kValidOpcodes[] = {
    {0x00, "RC_SEND_FIRST", kSendFirst},
    {0x01, "RC_SEND_MIDDLE", kSendMiddle},
    {0x02, "RC_SEND_LAST", kSendLast},
    {0x03, "RC_SEND_LAST_IMM", kSendLast | kWithImm},
    {0x04, "RC_SEND_ONLY", kSendOnly},
    {0x05, "RC_SEND_ONLY_IMM", kSendOnly | kWithImm},
    {0x06, "RC_RDMA_WRITE_FIRST", kWriteFirst},
    {0x07, "RC_RDMA_WRITE_MIDDLE", kWriteMiddle},
    {0x08, "RC_RDMA_WRITE_LAST", kWriteLast},
    {0x09, "RC_RDMA_WRITE_LAST_IMM", kWriteLast | kWithImm},
    {0x0a, "RC_RDMA_WRITE_ONLY", kWriteOnly},
    {0x0b, "RC_RDMA_WRITE_ONLY_IMM", kWriteOnly | kWithImm},
    {0x0c, "RC_RDMA_READ_REQUEST", kReadRequest},
    {0x0d, "RC_RDMA_READ_RESPONSE_FIRST", kReadResponse | kIsFirst | kHasAeth},
    {0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", kReadResponse | kIsMiddle},
    {0x0f, "RC_RDMA_READ_RESPONSE_LAST", kReadResponse | kIsLast | kHasAeth},
    {0x10, "RC_RDMA_READ_RESPONSE_ONLY", kReadResponse | kIsOnly | kHasAeth},
    {0x11, "RC_ACKNOWLEDGE", kIsAck | kIsResponse | kIsOnly | kHasAeth},
    {0x12, "RC_ATOMIC_ACKNOWLEDGE",
     kIsAtomicAck | kIsResponse | kIsOnly | kHasAeth | kHasAtomicAckEth},
    {0x13, "RC_COMPARE_SWAP", kAtomic},
    {0x14, "RC_FETCH_ADD", kAtomic},
    {0x16, "RC_SEND_LAST_INV", kSendLast | kHasIeth},
    {0x17, "RC_SEND_ONLY_INV", kSendOnly | kHasIeth},
    {0x20, "UC_SEND_FIRST", kSendFirst},
    {0x21, "UC_SEND_MIDDLE", kSendMiddle},
    {0x22, "UC_SEND_LAST", kSendLast},
    {0x23, "UC_SEND_LAST_IMM", kSendLast | kWithImm},
    {0x24, "UC_SEND_ONLY", kSendOnly},
    {0x25, "UC_SEND_ONLY_IMM", kSendOnly | kWithImm},
    {0x26, "UC_RDMA_WRITE_FIRST", kWriteFirst},
    {0x27, "UC_RDMA_WRITE_MIDDLE", kWriteMiddle},
    {0x28, "UC_RDMA_WRITE_LAST", kWriteLast},
    {0x29, "UC_RDMA_WRITE_LAST_IMM", kWriteLast | kWithImm},
    {0x2a, "UC_RDMA_WRITE_ONLY", kWriteOnly},
    {0x2b, "UC_RDMA_WRITE_ONLY_IMM", kWriteOnly | kWithImm},
    {0x64, "UD_SEND_ONLY", kSendOnly | kHasDeth},
    {0x65, "UD_SEND_ONLY_IMM", kSendOnly | kHasDeth | kWithImm},
    // XRC (IBA annex A14): RC's shapes; every request carries an XRCETH.
    {0xa0, "XRC_SEND_FIRST", kSendFirst | kHasXrceth},
    {0xa1, "XRC_SEND_MIDDLE", kSendMiddle | kHasXrceth},
    {0xa2, "XRC_SEND_LAST", kSendLast | kHasXrceth},
    {0xa3, "XRC_SEND_LAST_IMM", kSendLast | kWithImm | kHasXrceth},
    {0xa4, "XRC_SEND_ONLY", kSendOnly | kHasXrceth},
    {0xa5, "XRC_SEND_ONLY_IMM", kSendOnly | kWithImm | kHasXrceth},
    {0xa6, "XRC_RDMA_WRITE_FIRST", kWriteFirst | kHasXrceth},
    {0xa7, "XRC_RDMA_WRITE_MIDDLE", kWriteMiddle | kHasXrceth},
    {0xa8, "XRC_RDMA_WRITE_LAST", kWriteLast | kHasXrceth},
    {0xa9, "XRC_RDMA_WRITE_LAST_IMM", kWriteLast | kWithImm | kHasXrceth},
    {0xaa, "XRC_RDMA_WRITE_ONLY", kWriteOnly | kHasXrceth},
    {0xab, "XRC_RDMA_WRITE_ONLY_IMM", kWriteOnly | kWithImm | kHasXrceth},
    {0xac, "XRC_RDMA_READ_REQUEST", kReadRequest | kHasXrceth},
    {0xad, "XRC_RDMA_READ_RESPONSE_FIRST", kReadResponse | kIsFirst | kHasAeth},
    {0xae, "XRC_RDMA_READ_RESPONSE_MIDDLE", kReadResponse | kIsMiddle},
    {0xaf, "XRC_RDMA_READ_RESPONSE_LAST", kReadResponse | kIsLast | kHasAeth},
    {0xb0, "XRC_RDMA_READ_RESPONSE_ONLY", kReadResponse | kIsOnly | kHasAeth},
    {0xb1, "XRC_ACKNOWLEDGE", kIsAck | kIsResponse | kIsOnly | kHasAeth},
    {0xb2, "XRC_ATOMIC_ACKNOWLEDGE",
     kIsAtomicAck | kIsResponse | kIsOnly | kHasAeth | kHasAtomicAckEth},
    {0xb3, "XRC_COMPARE_SWAP", kAtomic | kHasXrceth},
    {0xb4, "XRC_FETCH_ADD", kAtomic | kHasXrceth},
    {0xb6, "XRC_SEND_LAST_INV", kSendLast | kHasIeth | kHasXrceth},
    {0xb7, "XRC_SEND_ONLY_INV", kSendOnly | kHasIeth | kHasXrceth},
    // DC (docs/dc.md): RC's shapes in the first manufacturer-specific range;
    // every request carries a DCETH.
    {0xc0, "DC_SEND_FIRST", kSendFirst | kHasDceth},
    {0xc1, "DC_SEND_MIDDLE", kSendMiddle | kHasDceth},
    {0xc2, "DC_SEND_LAST", kSendLast | kHasDceth},
    {0xc3, "DC_SEND_LAST_IMM", kSendLast | kWithImm | kHasDceth},
    {0xc4, "DC_SEND_ONLY", kSendOnly | kHasDceth},
    {0xc5, "DC_SEND_ONLY_IMM", kSendOnly | kWithImm | kHasDceth},
    {0xc6, "DC_RDMA_WRITE_FIRST", kWriteFirst | kHasDceth},
    {0xc7, "DC_RDMA_WRITE_MIDDLE", kWriteMiddle | kHasDceth},
    {0xc8, "DC_RDMA_WRITE_LAST", kWriteLast | kHasDceth},
    {0xc9, "DC_RDMA_WRITE_LAST_IMM", kWriteLast | kWithImm | kHasDceth},
    {0xca, "DC_RDMA_WRITE_ONLY", kWriteOnly | kHasDceth},
    {0xcb, "DC_RDMA_WRITE_ONLY_IMM", kWriteOnly | kWithImm | kHasDceth},
    {0xcc, "DC_RDMA_READ_REQUEST", kReadRequest | kHasDceth},
    {0xcd, "DC_RDMA_READ_RESPONSE_FIRST", kReadResponse | kIsFirst | kHasAeth},
    {0xce, "DC_RDMA_READ_RESPONSE_MIDDLE", kReadResponse | kIsMiddle},
    {0xcf, "DC_RDMA_READ_RESPONSE_LAST", kReadResponse | kIsLast | kHasAeth},
    {0xd0, "DC_RDMA_READ_RESPONSE_ONLY", kReadResponse | kIsOnly | kHasAeth},
    {0xd1, "DC_ACKNOWLEDGE", kIsAck | kIsResponse | kIsOnly | kHasAeth},
    {0xd2, "DC_ATOMIC_ACKNOWLEDGE",
     kIsAtomicAck | kIsResponse | kIsOnly | kHasAeth | kHasAtomicAckEth},
    {0xd3, "DC_COMPARE_SWAP", kAtomic | kHasDceth},
    {0xd4, "DC_FETCH_ADD", kAtomic | kHasDceth},
    {0xd6, "DC_SEND_LAST_INV", kSendLast | kHasIeth | kHasDceth},
    {0xd7, "DC_SEND_ONLY_INV", kSendOnly | kHasIeth | kHasDceth},
};

// Opcodes the spec assigns but ibemu does not implement: named for traces,
// rejected on receive.
inline constexpr OpcodeSpec kNamedInvalidOpcodes[] = {
    {0x15, "RC_RESERVED_0x15", 0},  // reserved in RC
    {0x40, "RD_SEND_FIRST", 0},
    {0x41, "RD_SEND_MIDDLE", 0},
    {0x42, "RD_SEND_LAST", 0},
    {0x43, "RD_SEND_LAST_IMM", 0},
    {0x44, "RD_SEND_ONLY", 0},
    {0x45, "RD_SEND_ONLY_IMM", 0},
    {0x46, "RD_RDMA_WRITE_FIRST", 0},
    {0x47, "RD_RDMA_WRITE_MIDDLE", 0},
    {0x48, "RD_RDMA_WRITE_LAST", 0},
    {0x49, "RD_RDMA_WRITE_LAST_IMM", 0},
    {0x4a, "RD_RDMA_WRITE_ONLY", 0},
    {0x4b, "RD_RDMA_WRITE_ONLY_IMM", 0},
    {0x4c, "RD_RDMA_READ_REQUEST", 0},
    {0x4d, "RD_RDMA_READ_RESPONSE_FIRST", 0},
    {0x4e, "RD_RDMA_READ_RESPONSE_MIDDLE", 0},
    {0x4f, "RD_RDMA_READ_RESPONSE_LAST", 0},
    {0x50, "RD_RDMA_READ_RESPONSE_ONLY", 0},
    {0x51, "RD_ACKNOWLEDGE", 0},
    {0x52, "RD_ATOMIC_ACKNOWLEDGE", 0},
    {0x53, "RD_COMPARE_SWAP", 0},
    {0x54, "RD_FETCH_ADD", 0},
    {0x55, "RD_RESYNC", 0},
    {0x81, "CNP", 0},
};

// Extension headers follow the BTH in this order (IBA 9.3, A14): XRCETH or
// DCETH, DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH. No opcode carries two of
// RETH/AtomicETH/AETH, so this order yields every opcode's layout.
constexpr OpcodeInfo make_info(const char* name, bool valid, uint8_t op, uint32_t flags) {
  OpcodeInfo info{};
  info.name = name;
  info.valid = valid;
  info.transport = static_cast<Transport>(op >> 5);
  info.flags = flags;
  info.reth_off = info.aeth_off = info.atomic_eth_off = info.atomic_ack_eth_off = kNoHeader;
  info.deth_off = info.immdt_off = info.ieth_off = info.xrceth_off = kNoHeader;
  info.dceth_off = kNoHeader;
  uint8_t off = 0;
  auto place = [&](uint32_t flag, uint8_t& slot, uint8_t size) {
    if (flags & flag) {
      slot = off;
      off = static_cast<uint8_t>(off + size);
    }
  };
  place(kHasXrceth, info.xrceth_off, 4);
  place(kHasDceth, info.dceth_off, 16);
  place(kHasDeth, info.deth_off, 8);
  place(kHasReth, info.reth_off, 16);
  place(kHasAtomicEth, info.atomic_eth_off, 28);
  place(kHasAeth, info.aeth_off, 4);
  place(kHasAtomicAckEth, info.atomic_ack_eth_off, 8);
  place(kHasImmDt, info.immdt_off, 4);
  place(kHasIeth, info.ieth_off, 4);
  info.ext_len = off;
  return info;
}

constexpr std::array<OpcodeInfo, 256> make_opcode_table() {
  std::array<OpcodeInfo, 256> table{};
  for (unsigned op = 0; op < 256; ++op) {
    table[op] = make_info("INVALID", false, static_cast<uint8_t>(op), 0);
  }
  for (const OpcodeSpec& s : kNamedInvalidOpcodes) table[s.op] = make_info(s.name, false, s.op, 0);
  for (const OpcodeSpec& s : kValidOpcodes) table[s.op] = make_info(s.name, true, s.op, s.flags);
  return table;
}

}  // namespace detail

inline constexpr std::array<OpcodeInfo, 256> kOpcodeTable = detail::make_opcode_table();

/// Largest ext_len of any valid opcode (DCETH and AtomicETH).
inline constexpr size_t kMaxExtLen = 44;

inline const OpcodeInfo& opcode_info(uint8_t opcode) noexcept { return kOpcodeTable[opcode]; }
inline const OpcodeInfo& opcode_info(Opcode opcode) noexcept {
  return kOpcodeTable[static_cast<uint8_t>(opcode)];
}

const char* to_string(Opcode op) noexcept;
const char* to_string(Transport t) noexcept;

// Layout spot checks against IBA 9.3 (the tests walk the whole table).
static_assert(kOpcodeTable[0x0b].reth_off == 0 && kOpcodeTable[0x0b].immdt_off == 16);
static_assert(kOpcodeTable[0x65].deth_off == 0 && kOpcodeTable[0x65].immdt_off == 8);
static_assert(kOpcodeTable[0x12].aeth_off == 0 && kOpcodeTable[0x12].atomic_ack_eth_off == 4);
static_assert(kOpcodeTable[0x13].ext_len == 28);
static_assert(kOpcodeTable[0xb3].xrceth_off == 0 && kOpcodeTable[0xb3].atomic_eth_off == 4);
static_assert(kOpcodeTable[0xd3].dceth_off == 0 && kOpcodeTable[0xd3].atomic_eth_off == 16 &&
              kOpcodeTable[0xd3].ext_len == kMaxExtLen);
static_assert(kOpcodeTable[0xd1].dceth_off == kNoHeader);   // responses carry none
static_assert(kOpcodeTable[0xb1].xrceth_off == kNoHeader);  // responses carry none
static_assert(!kOpcodeTable[0x15].valid && !kOpcodeTable[0x40].valid);

}  // namespace ibemu::wire
