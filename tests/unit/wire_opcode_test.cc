// The opcode table against the spec's opcode list (IBA 9.2) and header
// layouts (IBA 9.3), written out here independently of the table's builder.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "transport/wire/opcode.h"

namespace ibemu::wire {
namespace {

enum Ext { kDeth, kReth, kAtomicEth, kAeth, kAtomicAckEth, kImmDt, kIeth, kXrceth, kDceth };

struct Expected {
  Opcode op;
  const char* name;
  std::vector<Ext> headers;  // in wire order
  bool payload;
};

const std::vector<Expected>& spec_opcodes() {
  static const std::vector<Expected> v = {
      {Opcode::kRcSendFirst, "RC_SEND_FIRST", {}, true},
      {Opcode::kRcSendMiddle, "RC_SEND_MIDDLE", {}, true},
      {Opcode::kRcSendLast, "RC_SEND_LAST", {}, true},
      {Opcode::kRcSendLastImm, "RC_SEND_LAST_IMM", {kImmDt}, true},
      {Opcode::kRcSendOnly, "RC_SEND_ONLY", {}, true},
      {Opcode::kRcSendOnlyImm, "RC_SEND_ONLY_IMM", {kImmDt}, true},
      {Opcode::kRcWriteFirst, "RC_RDMA_WRITE_FIRST", {kReth}, true},
      {Opcode::kRcWriteMiddle, "RC_RDMA_WRITE_MIDDLE", {}, true},
      {Opcode::kRcWriteLast, "RC_RDMA_WRITE_LAST", {}, true},
      {Opcode::kRcWriteLastImm, "RC_RDMA_WRITE_LAST_IMM", {kImmDt}, true},
      {Opcode::kRcWriteOnly, "RC_RDMA_WRITE_ONLY", {kReth}, true},
      {Opcode::kRcWriteOnlyImm, "RC_RDMA_WRITE_ONLY_IMM", {kReth, kImmDt}, true},
      {Opcode::kRcReadRequest, "RC_RDMA_READ_REQUEST", {kReth}, false},
      {Opcode::kRcReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST", {kAeth}, true},
      {Opcode::kRcReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", {}, true},
      {Opcode::kRcReadResponseLast, "RC_RDMA_READ_RESPONSE_LAST", {kAeth}, true},
      {Opcode::kRcReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY", {kAeth}, true},
      {Opcode::kRcAcknowledge, "RC_ACKNOWLEDGE", {kAeth}, false},
      {Opcode::kRcAtomicAcknowledge, "RC_ATOMIC_ACKNOWLEDGE", {kAeth, kAtomicAckEth}, false},
      {Opcode::kRcCompareSwap, "RC_COMPARE_SWAP", {kAtomicEth}, false},
      {Opcode::kRcFetchAdd, "RC_FETCH_ADD", {kAtomicEth}, false},
      {Opcode::kRcSendLastInv, "RC_SEND_LAST_INV", {kIeth}, true},
      {Opcode::kRcSendOnlyInv, "RC_SEND_ONLY_INV", {kIeth}, true},
      {Opcode::kUcSendFirst, "UC_SEND_FIRST", {}, true},
      {Opcode::kUcSendMiddle, "UC_SEND_MIDDLE", {}, true},
      {Opcode::kUcSendLast, "UC_SEND_LAST", {}, true},
      {Opcode::kUcSendLastImm, "UC_SEND_LAST_IMM", {kImmDt}, true},
      {Opcode::kUcSendOnly, "UC_SEND_ONLY", {}, true},
      {Opcode::kUcSendOnlyImm, "UC_SEND_ONLY_IMM", {kImmDt}, true},
      {Opcode::kUcWriteFirst, "UC_RDMA_WRITE_FIRST", {kReth}, true},
      {Opcode::kUcWriteMiddle, "UC_RDMA_WRITE_MIDDLE", {}, true},
      {Opcode::kUcWriteLast, "UC_RDMA_WRITE_LAST", {}, true},
      {Opcode::kUcWriteLastImm, "UC_RDMA_WRITE_LAST_IMM", {kImmDt}, true},
      {Opcode::kUcWriteOnly, "UC_RDMA_WRITE_ONLY", {kReth}, true},
      {Opcode::kUcWriteOnlyImm, "UC_RDMA_WRITE_ONLY_IMM", {kReth, kImmDt}, true},
      {Opcode::kUdSendOnly, "UD_SEND_ONLY", {kDeth}, true},
      {Opcode::kUdSendOnlyImm, "UD_SEND_ONLY_IMM", {kDeth, kImmDt}, true},
      {static_cast<Opcode>(0xa0), "XRC_SEND_FIRST", {kXrceth}, true},
      {static_cast<Opcode>(0xa1), "XRC_SEND_MIDDLE", {kXrceth}, true},
      {static_cast<Opcode>(0xa2), "XRC_SEND_LAST", {kXrceth}, true},
      {static_cast<Opcode>(0xa3), "XRC_SEND_LAST_IMM", {kXrceth, kImmDt}, true},
      {static_cast<Opcode>(0xa4), "XRC_SEND_ONLY", {kXrceth}, true},
      {static_cast<Opcode>(0xa5), "XRC_SEND_ONLY_IMM", {kXrceth, kImmDt}, true},
      {static_cast<Opcode>(0xa6), "XRC_RDMA_WRITE_FIRST", {kXrceth, kReth}, true},
      {static_cast<Opcode>(0xa7), "XRC_RDMA_WRITE_MIDDLE", {kXrceth}, true},
      {static_cast<Opcode>(0xa8), "XRC_RDMA_WRITE_LAST", {kXrceth}, true},
      {static_cast<Opcode>(0xa9), "XRC_RDMA_WRITE_LAST_IMM", {kXrceth, kImmDt}, true},
      {static_cast<Opcode>(0xaa), "XRC_RDMA_WRITE_ONLY", {kXrceth, kReth}, true},
      {static_cast<Opcode>(0xab), "XRC_RDMA_WRITE_ONLY_IMM", {kXrceth, kReth, kImmDt}, true},
      {static_cast<Opcode>(0xac), "XRC_RDMA_READ_REQUEST", {kXrceth, kReth}, false},
      {static_cast<Opcode>(0xad), "XRC_RDMA_READ_RESPONSE_FIRST", {kAeth}, true},
      {static_cast<Opcode>(0xae), "XRC_RDMA_READ_RESPONSE_MIDDLE", {}, true},
      {static_cast<Opcode>(0xaf), "XRC_RDMA_READ_RESPONSE_LAST", {kAeth}, true},
      {static_cast<Opcode>(0xb0), "XRC_RDMA_READ_RESPONSE_ONLY", {kAeth}, true},
      {static_cast<Opcode>(0xb1), "XRC_ACKNOWLEDGE", {kAeth}, false},
      {static_cast<Opcode>(0xb2), "XRC_ATOMIC_ACKNOWLEDGE", {kAeth, kAtomicAckEth}, false},
      {static_cast<Opcode>(0xb3), "XRC_COMPARE_SWAP", {kXrceth, kAtomicEth}, false},
      {static_cast<Opcode>(0xb4), "XRC_FETCH_ADD", {kXrceth, kAtomicEth}, false},
      {static_cast<Opcode>(0xb6), "XRC_SEND_LAST_INV", {kXrceth, kIeth}, true},
      {static_cast<Opcode>(0xb7), "XRC_SEND_ONLY_INV", {kXrceth, kIeth}, true},
      {static_cast<Opcode>(0xc0), "DC_SEND_FIRST", {kDceth}, true},
      {static_cast<Opcode>(0xc1), "DC_SEND_MIDDLE", {kDceth}, true},
      {static_cast<Opcode>(0xc2), "DC_SEND_LAST", {kDceth}, true},
      {static_cast<Opcode>(0xc3), "DC_SEND_LAST_IMM", {kDceth, kImmDt}, true},
      {static_cast<Opcode>(0xc4), "DC_SEND_ONLY", {kDceth}, true},
      {static_cast<Opcode>(0xc5), "DC_SEND_ONLY_IMM", {kDceth, kImmDt}, true},
      {static_cast<Opcode>(0xc6), "DC_RDMA_WRITE_FIRST", {kDceth, kReth}, true},
      {static_cast<Opcode>(0xc7), "DC_RDMA_WRITE_MIDDLE", {kDceth}, true},
      {static_cast<Opcode>(0xc8), "DC_RDMA_WRITE_LAST", {kDceth}, true},
      {static_cast<Opcode>(0xc9), "DC_RDMA_WRITE_LAST_IMM", {kDceth, kImmDt}, true},
      {static_cast<Opcode>(0xca), "DC_RDMA_WRITE_ONLY", {kDceth, kReth}, true},
      {static_cast<Opcode>(0xcb), "DC_RDMA_WRITE_ONLY_IMM", {kDceth, kReth, kImmDt}, true},
      {static_cast<Opcode>(0xcc), "DC_RDMA_READ_REQUEST", {kDceth, kReth}, false},
      {static_cast<Opcode>(0xcd), "DC_RDMA_READ_RESPONSE_FIRST", {kAeth}, true},
      {static_cast<Opcode>(0xce), "DC_RDMA_READ_RESPONSE_MIDDLE", {}, true},
      {static_cast<Opcode>(0xcf), "DC_RDMA_READ_RESPONSE_LAST", {kAeth}, true},
      {static_cast<Opcode>(0xd0), "DC_RDMA_READ_RESPONSE_ONLY", {kAeth}, true},
      {static_cast<Opcode>(0xd1), "DC_ACKNOWLEDGE", {kAeth}, false},
      {static_cast<Opcode>(0xd2), "DC_ATOMIC_ACKNOWLEDGE", {kAeth, kAtomicAckEth}, false},
      {static_cast<Opcode>(0xd3), "DC_COMPARE_SWAP", {kDceth, kAtomicEth}, false},
      {static_cast<Opcode>(0xd4), "DC_FETCH_ADD", {kDceth, kAtomicEth}, false},
      {static_cast<Opcode>(0xd6), "DC_SEND_LAST_INV", {kDceth, kIeth}, true},
      {static_cast<Opcode>(0xd7), "DC_SEND_ONLY_INV", {kDceth, kIeth}, true},
  };
  return v;
}

uint8_t size_of(Ext e) {
  switch (e) {
    case kDeth:
      return 8;
    case kReth:
      return 16;
    case kAtomicEth:
      return 28;
    case kAeth:
      return 4;
    case kAtomicAckEth:
      return 8;
    case kImmDt:
      return 4;
    case kIeth:
      return 4;
    case kXrceth:
      return 4;
    case kDceth:
      return 16;
  }
  return 0;
}

uint8_t offset_in(const OpcodeInfo& i, Ext e) {
  switch (e) {
    case kDeth:
      return i.deth_off;
    case kReth:
      return i.reth_off;
    case kAtomicEth:
      return i.atomic_eth_off;
    case kAeth:
      return i.aeth_off;
    case kAtomicAckEth:
      return i.atomic_ack_eth_off;
    case kImmDt:
      return i.immdt_off;
    case kIeth:
      return i.ieth_off;
    case kXrceth:
      return i.xrceth_off;
    case kDceth:
      return i.dceth_off;
  }
  return kNoHeader;
}

uint32_t flag_of(Ext e) {
  const uint32_t f[] = {kHasDeth,  kHasReth, kHasAtomicEth, kHasAeth, kHasAtomicAckEth,
                        kHasImmDt, kHasIeth, kHasXrceth,    kHasDceth};
  return f[e];
}

TEST(WireOpcode, GivenSpecOpcodeListExpectEachValidWithSpecLayout) {
  for (const Expected& e : spec_opcodes()) {
    const OpcodeInfo& info = opcode_info(e.op);
    SCOPED_TRACE(e.name);
    EXPECT_TRUE(info.valid);
    EXPECT_STREQ(info.name, e.name);
    EXPECT_STREQ(to_string(e.op), e.name);
    EXPECT_EQ(static_cast<uint8_t>(info.transport), static_cast<uint8_t>(e.op) >> 5);
    EXPECT_EQ((info.flags & kHasPayload) != 0, e.payload);
    uint8_t off = 0;
    for (Ext x : e.headers) {
      EXPECT_EQ(offset_in(info, x), off) << "header " << x;
      EXPECT_TRUE(info.flags & flag_of(x));
      off = static_cast<uint8_t>(off + size_of(x));
    }
    EXPECT_EQ(info.ext_len, off);
    for (int x = kDeth; x <= kDceth; ++x) {
      bool listed = false;
      for (Ext y : e.headers) listed |= y == x;
      if (!listed) {
        EXPECT_EQ(offset_in(info, static_cast<Ext>(x)), kNoHeader) << "header " << x;
        EXPECT_FALSE(info.flags & flag_of(static_cast<Ext>(x)));
      }
    }
  }
}

TEST(WireOpcode, GivenAll256OpcodesExpectOnlyTheSpecListValid) {
  std::map<uint8_t, bool> listed;
  for (const Expected& e : spec_opcodes()) listed[static_cast<uint8_t>(e.op)] = true;
  int valid = 0;
  for (unsigned op = 0; op < 256; ++op) {
    const OpcodeInfo& info = opcode_info(static_cast<uint8_t>(op));
    EXPECT_EQ(info.valid, listed.count(static_cast<uint8_t>(op)) == 1) << std::hex << op;
    EXPECT_EQ(static_cast<unsigned>(info.transport), op >> 5);
    ASSERT_NE(info.name, nullptr);
    if (!info.valid) {
      EXPECT_EQ(info.flags, 0u);
      EXPECT_EQ(info.ext_len, 0);
    }
    valid += info.valid;
  }
  EXPECT_EQ(valid, 37 + 23 + 23);
  EXPECT_STREQ(opcode_info(0x40).name, "RD_SEND_FIRST");
  EXPECT_STREQ(opcode_info(0x81).name, "CNP");
  EXPECT_STREQ(opcode_info(0xff).name, "INVALID");
}

TEST(WireOpcode, GivenValidOpcodesExpectConsistentClassification) {
  for (unsigned op = 0; op < 256; ++op) {
    const OpcodeInfo& info = opcode_info(static_cast<uint8_t>(op));
    if (!info.valid) continue;
    SCOPED_TRACE(info.name);
    const uint32_t f = info.flags;
    // Exactly one direction.
    EXPECT_NE((f & kIsRequest) != 0, (f & kIsResponse) != 0);
    // Exactly one kind.
    const uint32_t kind = f & (kIsSend | kIsWrite | kIsReadRequest | kIsReadResponse | kIsAck |
                               kIsAtomic | kIsAtomicAck);
    EXPECT_EQ(std::popcount(kind), 1);
    // Position is first, middle, last or only (= first|last).
    const uint32_t pos = f & (kIsFirst | kIsMiddle | kIsLast);
    EXPECT_TRUE(pos == kIsFirst || pos == kIsMiddle || pos == kIsLast || pos == kIsOnly);
    // IBA 9.2: SE only on the last/only packet of a SEND or a WRITE with immediate.
    const bool se_ok = (f & kIsLast) && ((f & kIsSend) || ((f & kIsWrite) && (f & kHasImmDt)));
    EXPECT_EQ((f & kSolicitedAllowed) != 0, se_ok);
    // RETH on the first packet of a write and on read requests only.
    EXPECT_EQ((f & kHasReth) != 0, ((f & kIsWrite) && (f & kIsFirst)) || (f & kIsReadRequest));
    // Immediate data only on the last packet.
    if (f & kHasImmDt) {
      EXPECT_TRUE(f & kIsLast);
    }
    // UD carries a DETH, nothing else does; XRC requests an XRCETH.
    EXPECT_EQ((f & kHasDeth) != 0, info.transport == Transport::kUd);
    EXPECT_EQ((f & kHasXrceth) != 0, info.transport == Transport::kXrc && (f & kIsRequest));
    EXPECT_EQ((f & kHasDceth) != 0, info.transport == Transport::kDc && (f & kIsRequest));
    EXPECT_LE(info.ext_len, kMaxExtLen);
  }
  EXPECT_TRUE(opcode_info(Opcode::kRcSendOnly).has(kIsOnly));
  EXPECT_FALSE(opcode_info(Opcode::kRcSendFirst).has(kIsOnly));
}

TEST(WireOpcode, GivenTransportsExpectNames) {
  EXPECT_STREQ(to_string(Transport::kRc), "RC");
  EXPECT_STREQ(to_string(Transport::kUc), "UC");
  EXPECT_STREQ(to_string(Transport::kRd), "RD");
  EXPECT_STREQ(to_string(Transport::kUd), "UD");
  EXPECT_STREQ(to_string(Transport::kXrc), "XRC");
  EXPECT_STREQ(to_string(Transport::kDc), "DC");
}

}  // namespace
}  // namespace ibemu::wire
