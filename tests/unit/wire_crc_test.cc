// ICRC and VCRC (IBA 7.8).
//
// The reference vectors are three packets from a public Endace ERF capture of
// real InfiniBand traffic between ConnectX HCAs (infiniband.pcap): an RC
// Acknowledge, an RC SEND Only and a UD SEND Only with a GRH (IPoIB ARP to a
// multicast group). Their ICRC and VCRC were produced by hardware, so they pin
// down the conventions: the CRC-32 and CRC-16 are both reflected, preset to
// ones and complemented, stored least significant byte first; for a packet
// with a GRH the whole LRH is masked out of the ICRC.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "transport/wire/crc.h"
#include "transport/wire/packet.h"

namespace ibemu::wire {
namespace {

// RC Acknowledge, DLID 4, SLID 1, QPN 0x870408, PSN 0xd40a55, AETH ACK credits=31 MSN 1.
const std::vector<uint8_t> kCapturedAck = {
    0x00, 0x02, 0x00, 0x04, 0x00, 0x07, 0x00, 0x01, 0x11, 0x40, 0xff, 0xff, 0x00, 0x87, 0x04,
    0x08, 0x00, 0xd4, 0x0a, 0x55, 0x1f, 0x00, 0x00, 0x01, 0xa8, 0x03, 0x55, 0x50, 0x30, 0x81,
};

// RC SEND Only (IPoIB-CM ICMP echo), DLID 1, SLID 4, QPN 0xfc0407, AckReq, 88-byte payload.
const std::vector<uint8_t> kCapturedSendOnly = {
    0x00, 0x02, 0x00, 0x01, 0x00, 0x1c, 0x00, 0x04, 0x04, 0x40, 0xff, 0xff, 0x00, 0xfc, 0x04,
    0x07, 0x80, 0xd4, 0x0a, 0x55, 0x08, 0x00, 0x00, 0x00, 0x45, 0x00, 0x00, 0x54, 0x00, 0x00,
    0x40, 0x00, 0x40, 0x01, 0x25, 0x4e, 0x0a, 0x00, 0x01, 0x22, 0x0a, 0x00, 0x00, 0x3a, 0x08,
    0x00, 0x85, 0x76, 0x17, 0x02, 0x00, 0x01, 0xf7, 0x41, 0x2b, 0x48, 0x00, 0x00, 0x00, 0x00,
    0x72, 0x29, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16,
    0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25,
    0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34,
    0x35, 0x36, 0x37, 0x0a, 0xcc, 0xa5, 0xdf, 0x24, 0xa8,
};

// UD SEND Only with GRH to multicast DLID 0xc000, QPN 0xffffff, Q_Key 0xb1b, 60-byte payload.
const std::vector<uint8_t> kCapturedUdGrh = {
    0x00, 0x03, 0xc0, 0x00, 0x00, 0x21, 0x00, 0x04, 0x60, 0x00, 0x00, 0x00, 0x00, 0x54, 0x1b,
    0x00, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0xc9, 0x02, 0x00, 0x24,
    0xf6, 0x36, 0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff,
    0xff, 0xff, 0xff, 0x64, 0x40, 0xff, 0xff, 0x00, 0xff, 0xff, 0xff, 0x00, 0x00, 0x20, 0xaf,
    0x00, 0x00, 0x0b, 0x1b, 0x00, 0x00, 0x04, 0x05, 0x08, 0x06, 0x00, 0x00, 0x00, 0x20, 0x08,
    0x00, 0x14, 0x04, 0x00, 0x01, 0x80, 0x00, 0x04, 0x05, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x02, 0xc9, 0x02, 0x00, 0x24, 0xf6, 0x36, 0x0a, 0x00, 0x01, 0x22, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x3a, 0xbd, 0x6b, 0xd6, 0xa8, 0x88, 0x83,
};

std::vector<uint8_t> build(const PacketHeaders& h, const uint8_t* payload, size_t n) {
  std::vector<uint8_t> buf(kMaxHeaders + n + 3 + kIcrcSize + kVcrcSize);
  const size_t hl = write_headers(buf.data(), h);
  if (n) std::memcpy(buf.data() + hl, payload, n);
  buf.resize(finalize_packet(buf.data(), hl, n));
  return buf;
}

void expect_crcs_match(const std::vector<uint8_t>& p, bool has_grh) {
  const size_t vcrc_off = p.size() - kVcrcSize;
  const size_t icrc_off = vcrc_off - kIcrcSize;
  EXPECT_EQ(compute_icrc(p.data(), icrc_off, has_grh), load_icrc(p.data() + icrc_off));
  EXPECT_EQ(compute_vcrc(p.data(), vcrc_off), load_vcrc(p.data() + vcrc_off));
}

TEST(WireCrc, GivenCapturedLocalPacketsExpectIcrcAndVcrcMatchHardware) {
  expect_crcs_match(kCapturedAck, false);
  expect_crcs_match(kCapturedSendOnly, false);
  // Stored least significant byte first.
  EXPECT_EQ(load_icrc(&kCapturedAck[24]), 0x505503a8u);
  EXPECT_EQ(load_vcrc(&kCapturedAck[28]), 0x8130);
}

TEST(WireCrc, GivenCapturedGlobalPacketExpectIcrcMasksWholeLrh) {
  expect_crcs_match(kCapturedUdGrh, true);
  const size_t icrc_off = kCapturedUdGrh.size() - 6;
  // The local-packet mask (LRH:VL only, Resv8a at offset 12) does not match.
  EXPECT_NE(compute_icrc(kCapturedUdGrh.data(), icrc_off, false),
            load_icrc(&kCapturedUdGrh[icrc_off]));
}

TEST(WireCrc, GivenCapturedPacketsExpectParseAcceptsThemWithSpecFields) {
  PacketView v;
  ASSERT_EQ(parse_packet(kCapturedAck.data(), kCapturedAck.size(), &v), ParseError::kOk);
  EXPECT_EQ(v.info, &opcode_info(Opcode::kRcAcknowledge));
  EXPECT_EQ(v.lrh().dlid(), 4);
  EXPECT_EQ(v.lrh().slid(), 1);
  EXPECT_EQ(v.bth().dest_qp(), 0x870408u);
  EXPECT_EQ(v.bth().psn(), 0xd40a55u);
  EXPECT_EQ(aeth_type(v.aeth().syndrome()), AckType::kAck);
  EXPECT_EQ(aeth_value(v.aeth().syndrome()), kAethCreditInvalid);
  EXPECT_EQ(v.aeth().msn(), 1u);

  ASSERT_EQ(parse_packet(kCapturedSendOnly.data(), kCapturedSendOnly.size(), &v), ParseError::kOk);
  EXPECT_EQ(v.info, &opcode_info(Opcode::kRcSendOnly));
  EXPECT_TRUE(v.bth().ack_req());
  EXPECT_EQ(v.payload_len, 88u);
  EXPECT_EQ(v.payload()[0], 0x08);

  ASSERT_EQ(parse_packet(kCapturedUdGrh.data(), kCapturedUdGrh.size(), &v), ParseError::kOk);
  EXPECT_EQ(v.info, &opcode_info(Opcode::kUdSendOnly));
  EXPECT_TRUE(v.has_grh);
  EXPECT_EQ(v.grh().pay_len(), 84);
  EXPECT_EQ(v.grh().next_hdr(), kGrhNextHdrIba);
  EXPECT_EQ(v.grh().dgid()[0], 0xff);
  EXPECT_EQ(v.deth().qkey(), 0xb1bu);
  EXPECT_EQ(v.deth().src_qp(), 0x405u);
  EXPECT_EQ(v.payload_len, 60u);
}

TEST(WireCrc, GivenCapturedHeaderValuesExpectBuilderReproducesEveryByte) {
  PacketHeaders ack;
  ack.lrh.set_dlid(4);
  ack.lrh.set_slid(1);
  ack.bth.set_opcode(static_cast<uint8_t>(Opcode::kRcAcknowledge));
  ack.bth.set_mig_req(true);
  ack.bth.set_pkey(0xffff);
  ack.bth.set_dest_qp(0x870408);
  ack.bth.set_psn(0xd40a55);
  ack.aeth.set_syndrome(make_ack_syndrome(kAethCreditInvalid));
  ack.aeth.set_msn(1);
  EXPECT_EQ(build(ack, nullptr, 0), kCapturedAck);

  PacketHeaders send;
  send.lrh.set_dlid(1);
  send.lrh.set_slid(4);
  send.bth.set_opcode(static_cast<uint8_t>(Opcode::kRcSendOnly));
  send.bth.set_mig_req(true);
  send.bth.set_pkey(0xffff);
  send.bth.set_dest_qp(0xfc0407);
  send.bth.set_ack_req(true);
  send.bth.set_psn(0xd40a55);
  EXPECT_EQ(build(send, &kCapturedSendOnly[20], 88), kCapturedSendOnly);

  PacketHeaders ud;
  ud.lrh.set_dlid(0xc000);
  ud.lrh.set_slid(4);
  ud.has_grh = true;
  ud.grh.set_sgid(&kCapturedUdGrh[16]);
  ud.grh.set_dgid(&kCapturedUdGrh[32]);
  ud.bth.set_opcode(static_cast<uint8_t>(Opcode::kUdSendOnly));
  ud.bth.set_mig_req(true);
  ud.bth.set_pkey(0xffff);
  ud.bth.set_dest_qp(0xffffff);
  ud.bth.set_psn(0x20af);
  ud.deth.set_qkey(0xb1b);
  ud.deth.set_src_qp(0x405);
  EXPECT_EQ(build(ud, &kCapturedUdGrh[68], 60), kCapturedUdGrh);
}

// Bit positions (byte, mask) of the ICRC variant fields (IBA 7.8.1).
bool is_variant_bit(size_t byte, uint8_t bit, bool has_grh) {
  if (!has_grh) return (byte == 0 && (bit & 0xf0)) || byte == Lrh::kSize + 4;
  if (byte < Lrh::kSize) return true;  // routers rebuild the LRH
  const size_t g = byte - Lrh::kSize;
  if (g == 0) return bit & 0x0f;               // TClass high nibble
  if (g >= 1 && g <= 3) return true;           // TClass low nibble, FlowLabel
  if (g == 7) return true;                     // HopLmt
  return byte == Lrh::kSize + Grh::kSize + 4;  // BTH:Resv8a
}

std::vector<uint8_t> sample_packet(bool has_grh) {
  PacketHeaders h;
  h.lrh.set_vl(2);
  h.lrh.set_sl(5);
  h.lrh.set_dlid(0x1234);
  h.lrh.set_slid(0x0042);
  h.has_grh = has_grh;
  h.grh.set_tclass(0x5a);
  h.grh.set_flow_label(0xabcde);
  h.grh.set_hop_limit(64);
  Gid s{}, d{};
  s[0] = 0xfe;
  s[15] = 1;
  d[0] = 0xfe;
  d[15] = 2;
  h.grh.set_sgid(s);
  h.grh.set_dgid(d);
  h.bth.set_opcode(static_cast<uint8_t>(Opcode::kRcWriteFirst));
  h.bth.set_pkey(0x8001);
  h.bth.set_dest_qp(0x000abc);
  h.bth.set_psn(0xfffffe);
  h.reth.set_va(0x00007f0012345678ull);
  h.reth.set_rkey(0xcafe);
  h.reth.set_dma_len(8192);
  uint8_t payload[13];
  for (size_t i = 0; i < sizeof payload; ++i) payload[i] = static_cast<uint8_t>(0x30 + i);
  return build(h, payload, sizeof payload);
}

class WireCrcBitFlip : public ::testing::TestWithParam<bool> {};

TEST_P(WireCrcBitFlip, GivenAnySingleBitFlipExpectIcrcChangesExactlyOutsideVariantFields) {
  const bool has_grh = GetParam();
  std::vector<uint8_t> p = sample_packet(has_grh);
  const size_t icrc_off = p.size() - kVcrcSize - kIcrcSize;
  const uint32_t icrc = compute_icrc(p.data(), icrc_off, has_grh);
  ASSERT_EQ(icrc, load_icrc(p.data() + icrc_off));
  for (size_t byte = 0; byte < icrc_off; ++byte) {
    for (int b = 0; b < 8; ++b) {
      const uint8_t bit = static_cast<uint8_t>(1u << b);
      p[byte] ^= bit;
      const uint32_t flipped = compute_icrc(p.data(), icrc_off, has_grh);
      p[byte] ^= bit;
      if (is_variant_bit(byte, bit, has_grh)) {
        EXPECT_EQ(flipped, icrc) << "variant byte " << byte << " bit " << b;
      } else {
        EXPECT_NE(flipped, icrc) << "byte " << byte << " bit " << b;
      }
    }
  }
}

TEST_P(WireCrcBitFlip, GivenAnySingleBitFlipExpectVcrcChanges) {
  std::vector<uint8_t> p = sample_packet(GetParam());
  const size_t vcrc_off = p.size() - kVcrcSize;
  const uint16_t vcrc = compute_vcrc(p.data(), vcrc_off);
  for (size_t byte = 0; byte < vcrc_off; ++byte) {
    for (int b = 0; b < 8; ++b) {
      p[byte] ^= static_cast<uint8_t>(1u << b);
      EXPECT_NE(compute_vcrc(p.data(), vcrc_off), vcrc) << "byte " << byte << " bit " << b;
      p[byte] ^= static_cast<uint8_t>(1u << b);
    }
  }
}

TEST_P(WireCrcBitFlip, GivenAnySingleBitFlipAnywhereExpectParseRejects) {
  std::vector<uint8_t> p = sample_packet(GetParam());
  ASSERT_EQ(parse_packet(p.data(), p.size(), nullptr), ParseError::kOk);
  for (size_t byte = 0; byte < p.size(); ++byte) {
    for (int b = 0; b < 8; ++b) {
      p[byte] ^= static_cast<uint8_t>(1u << b);
      EXPECT_NE(parse_packet(p.data(), p.size(), nullptr), ParseError::kOk)
          << "byte " << byte << " bit " << b;
      p[byte] ^= static_cast<uint8_t>(1u << b);
    }
  }
}

// A switch that corrupts a bit and then regenerates the VCRC (as every hop
// does) is caught by the ICRC.
TEST_P(WireCrcBitFlip, GivenNonVariantFlipWithFreshVcrcExpectBadIcrc) {
  const bool has_grh = GetParam();
  std::vector<uint8_t> p = sample_packet(has_grh);
  const size_t vcrc_off = p.size() - kVcrcSize;
  const size_t first_transport_byte = has_grh ? Lrh::kSize + Grh::kSize : Lrh::kSize;
  for (size_t byte = first_transport_byte; byte < vcrc_off - kIcrcSize; ++byte) {
    for (int b = 0; b < 8; ++b) {
      const uint8_t bit = static_cast<uint8_t>(1u << b);
      if (is_variant_bit(byte, bit, has_grh)) continue;
      std::vector<uint8_t> q = p;
      q[byte] ^= bit;
      store_vcrc(q.data() + vcrc_off, compute_vcrc(q.data(), vcrc_off));
      EXPECT_EQ(parse_packet(q.data(), q.size(), nullptr), ParseError::kBadIcrc)
          << "byte " << byte << " bit " << b;
    }
  }
}

// What switches and routers may rewrite does not invalidate the packet once
// they regenerate the VCRC.
TEST_P(WireCrcBitFlip, GivenVariantFieldRewritesWithFreshVcrcExpectParseOk) {
  const bool has_grh = GetParam();
  const std::vector<uint8_t> p = sample_packet(has_grh);
  const size_t vcrc_off = p.size() - kVcrcSize;
  const size_t bth_off = has_grh ? Lrh::kSize + Grh::kSize : Lrh::kSize;
  auto rewrite_and_parse = [&](auto&& edit) {
    std::vector<uint8_t> q = p;
    edit(q.data());
    store_vcrc(q.data() + vcrc_off, compute_vcrc(q.data(), vcrc_off));
    return parse_packet(q.data(), q.size(), nullptr);
  };
  auto edit_lrh = [&](auto&& f) {
    return rewrite_and_parse([&](uint8_t* d) {
      Lrh l = Lrh::from(d);
      f(l);
      l.to(d);
    });
  };
  auto edit_bth = [&](auto&& f) {
    return rewrite_and_parse([&](uint8_t* d) {
      Bth b = Bth::from(d + bth_off);
      f(b);
      b.to(d + bth_off);
    });
  };
  EXPECT_EQ(edit_lrh([](Lrh& l) { l.set_vl(15); }), ParseError::kOk);
  EXPECT_EQ(edit_bth([](Bth& b) { b.set_fecn(true); }), ParseError::kOk);
  EXPECT_EQ(edit_bth([](Bth& b) { b.set_becn(true); }), ParseError::kOk);
  EXPECT_EQ(edit_bth([](Bth& b) { b.set_resv8a(0x3f); }), ParseError::kOk);
  if (has_grh) {
    EXPECT_EQ(edit_lrh([](Lrh& l) { l.set_sl(9); }), ParseError::kOk);
    EXPECT_EQ(edit_lrh([](Lrh& l) { l.set_dlid(0x7777); }), ParseError::kOk);
    EXPECT_EQ(edit_lrh([](Lrh& l) { l.set_slid(0x0101); }), ParseError::kOk);
    auto edit_grh = [&](auto&& f) {
      return rewrite_and_parse([&](uint8_t* d) {
        Grh g = Grh::from(d + Lrh::kSize);
        f(g);
        g.to(d + Lrh::kSize);
      });
    };
    EXPECT_EQ(edit_grh([](Grh& g) { g.set_tclass(0xff); }), ParseError::kOk);
    EXPECT_EQ(edit_grh([](Grh& g) { g.set_flow_label(1); }), ParseError::kOk);
    EXPECT_EQ(edit_grh([](Grh& g) { g.set_hop_limit(63); }), ParseError::kOk);
  } else {
    // On a local packet the rest of the LRH is invariant.
    EXPECT_EQ(edit_lrh([](Lrh& l) { l.set_dlid(0x7777); }), ParseError::kBadIcrc);
    EXPECT_EQ(edit_lrh([](Lrh& l) { l.set_sl(9); }), ParseError::kBadIcrc);
  }
}

INSTANTIATE_TEST_SUITE_P(LocalAndGlobal, WireCrcBitFlip, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Global" : "Local"; });

TEST(WireCrc, GivenVerificationOffExpectCorruptCrcsAccepted) {
  std::vector<uint8_t> p = kCapturedAck;
  p[24] ^= 0xff;
  p[29] ^= 0xff;
  EXPECT_EQ(parse_packet(p.data(), p.size(), nullptr, true), ParseError::kBadVcrc);
  EXPECT_EQ(parse_packet(p.data(), p.size(), nullptr, false), ParseError::kOk);
}

}  // namespace
}  // namespace ibemu::wire
