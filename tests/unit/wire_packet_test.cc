// Packet build/parse: every valid opcode round-trips; malformed input of every
// kind is rejected (IBA 9.6 header checks that need no QP state) and never
// read out of bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "transport/wire/packet.h"

namespace ibemu::wire {
namespace {

std::vector<uint8_t> build(const PacketHeaders& h, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> buf(kMaxHeaders + payload.size() + 3 + kIcrcSize + kVcrcSize);
  const size_t hl = write_headers(buf.data(), h);
  if (!payload.empty()) std::memcpy(buf.data() + hl, payload.data(), payload.size());
  buf.resize(finalize_packet(buf.data(), hl, payload.size()));
  return buf;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed = 0) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 13 + 1);
  return v;
}

// Every header field set to something recognisable.
PacketHeaders full_headers(uint8_t opcode, bool has_grh) {
  PacketHeaders h;
  h.lrh.set_vl(1);
  h.lrh.set_sl(3);
  h.lrh.set_dlid(0x0003);
  h.lrh.set_slid(0x0001);
  h.has_grh = has_grh;
  h.grh.set_tclass(0x12);
  h.grh.set_flow_label(0x34567);
  h.grh.set_hop_limit(0xff);
  Gid s, d;
  for (int i = 0; i < 16; ++i) {
    s[i] = static_cast<uint8_t>(0xa0 + i);
    d[i] = static_cast<uint8_t>(0xb0 + i);
  }
  h.grh.set_sgid(s);
  h.grh.set_dgid(d);
  h.bth.set_opcode(opcode);
  h.bth.set_se(opcode_info(opcode).flags & kSolicitedAllowed);
  h.bth.set_pkey(0xffff);
  h.bth.set_dest_qp(0x000012);
  h.bth.set_ack_req(true);
  h.bth.set_psn(0x00abcd);
  h.reth.set_va(0x1122334455667788ull);
  h.reth.set_rkey(0x99aabbcc);
  h.reth.set_dma_len(0x00010000);
  h.aeth.set_syndrome(make_nak_syndrome(NakCode::kRemoteAccessError));
  h.aeth.set_msn(0x00fedc);
  h.atomic_eth.set_va(0x0000100000002000ull);
  h.atomic_eth.set_rkey(0x01020304);
  h.atomic_eth.set_swap_add(0x0a0b0c0d0e0f1011ull);
  h.atomic_eth.set_compare(0x2122232425262728ull);
  h.atomic_ack_eth.set_orig_data(0x3132333435363738ull);
  h.deth.set_qkey(0x80010000);
  h.deth.set_src_qp(0x000077);
  const uint8_t imm[4] = {0xde, 0xad, 0xbe, 0xef};
  h.immdt = ImmDt::from(imm);
  h.ieth.set_rkey(0x55667788);
  h.xrceth.set_srqn(0x00abcd);
  return h;
}

std::vector<uint8_t> valid_opcodes() {
  std::vector<uint8_t> v;
  for (unsigned op = 0; op < 256; ++op) {
    if (opcode_info(static_cast<uint8_t>(op)).valid) v.push_back(static_cast<uint8_t>(op));
  }
  return v;
}

template <typename H>
void expect_same(const H& got, const H& want, bool present, const char* what) {
  const H zero{};
  EXPECT_EQ(0, std::memcmp(got.raw, present ? want.raw : zero.raw, sizeof got.raw)) << what;
}

// Re-seals ICRC and VCRC after a test edited header fields in place.
void reseal(std::vector<uint8_t>& p) {
  const size_t vcrc_off = p.size() - kVcrcSize;
  const size_t icrc_off = vcrc_off - kIcrcSize;
  const bool has_grh = Lrh::from(p.data()).lnh() == kLnhIbaGlobal;
  store_icrc(p.data() + icrc_off, compute_icrc(p.data(), icrc_off, has_grh));
  store_vcrc(p.data() + vcrc_off, compute_vcrc(p.data(), vcrc_off));
}

ParseError parse_exact(const std::vector<uint8_t>& p, size_t n, bool verify = true) {
  // A heap copy of exactly n bytes, so the sanitizers see any over-read.
  std::unique_ptr<uint8_t[]> copy(new uint8_t[n == 0 ? 1 : n]);
  if (n) std::memcpy(copy.get(), p.data(), n);
  PacketView v;
  return parse_packet(n ? copy.get() : nullptr, n, &v, verify);
}

TEST(WirePacket, GivenEveryValidOpcodeExpectBuildParseRoundTrip) {
  for (uint8_t op : valid_opcodes()) {
    const OpcodeInfo& info = opcode_info(op);
    for (bool has_grh : {false, true}) {
      const std::vector<size_t> sizes =
          info.flags & kHasPayload ? std::vector<size_t>{0, 1, 2, 3, 4, 5, 255, kMaxPayload}
                                   : std::vector<size_t>{0};
      for (size_t n : sizes) {
        SCOPED_TRACE(std::string(info.name) + (has_grh ? " grh" : "") + " payload " +
                     std::to_string(n));
        const PacketHeaders h = full_headers(op, has_grh);
        const std::vector<uint8_t> payload = pattern(n, op);
        const std::vector<uint8_t> p = build(h, payload);
        const size_t pad = (4 - n % 4) % 4;
        const size_t bth_off = has_grh ? 48 : 8;
        const size_t header_len = bth_off + Bth::kSize + info.ext_len;
        ASSERT_EQ(p.size(), header_len + n + pad + kIcrcSize + kVcrcSize);

        PacketView v;
        ASSERT_EQ(parse_packet(p.data(), p.size(), &v), ParseError::kOk);
        EXPECT_EQ(v.info, &info);
        EXPECT_EQ(v.has_grh, has_grh);
        EXPECT_EQ(v.header_len, header_len);
        EXPECT_EQ(v.bth_offset(), bth_off);
        EXPECT_EQ(v.opcode(), op);
        EXPECT_EQ(v.payload_len, n);
        EXPECT_EQ(v.len, p.size());
        if (n > 0) {
          EXPECT_EQ(0, std::memcmp(v.payload(), payload.data(), n));
        }
        for (size_t i = 0; i < pad; ++i) EXPECT_EQ(v.payload()[n + i], 0) << "pad byte";

        const Lrh lrh = v.lrh();
        EXPECT_EQ(lrh.lnh(), has_grh ? kLnhIbaGlobal : kLnhIbaLocal);
        EXPECT_EQ(lrh.pkt_len() * 4u, p.size() - kVcrcSize);
        EXPECT_EQ(lrh.vl(), 1);
        EXPECT_EQ(lrh.sl(), 3);
        EXPECT_EQ(lrh.dlid(), 3);
        EXPECT_EQ(lrh.slid(), 1);
        const Bth bth = v.bth();
        EXPECT_EQ(bth.pad_cnt(), pad);
        EXPECT_EQ(bth.dest_qp(), 0x12u);
        EXPECT_EQ(bth.psn(), 0xabcdu);
        if (has_grh) {
          const Grh grh = v.grh();
          EXPECT_EQ(grh.ip_ver(), kGrhIpVer);
          EXPECT_EQ(grh.next_hdr(), kGrhNextHdrIba);
          EXPECT_EQ(grh.pay_len(), p.size() - kVcrcSize - 48);
          EXPECT_EQ(grh.sgid(), h.grh.sgid());
          EXPECT_EQ(grh.dgid(), h.grh.dgid());
          EXPECT_EQ(grh.flow_label(), 0x34567u);
        }
        expect_same(v.reth(), h.reth, info.flags & kHasReth, "RETH");
        expect_same(v.aeth(), h.aeth, info.flags & kHasAeth, "AETH");
        expect_same(v.atomic_eth(), h.atomic_eth, info.flags & kHasAtomicEth, "AtomicETH");
        expect_same(v.atomic_ack_eth(), h.atomic_ack_eth, info.flags & kHasAtomicAckEth,
                    "AtomicAckETH");
        expect_same(v.deth(), h.deth, info.flags & kHasDeth, "DETH");
        expect_same(v.immdt(), h.immdt, info.flags & kHasImmDt, "ImmDt");
        expect_same(v.ieth(), h.ieth, info.flags & kHasIeth, "IETH");
        expect_same(v.xrceth(), h.xrceth, info.flags & kHasXrceth, "XRCETH");
      }
    }
  }
}

TEST(WirePacket, GivenHeadersExpectWriteHeadersFixesStructuralFields) {
  PacketHeaders h = full_headers(static_cast<uint8_t>(Opcode::kRcSendOnly), true);
  h.lrh.set_lnh(0);
  h.grh.set_ip_ver(4);
  h.grh.set_next_hdr(0x11);
  uint8_t buf[kMaxHeaders];
  EXPECT_EQ(write_headers(buf, h), 60u);
  EXPECT_EQ(Lrh::from(buf).lnh(), kLnhIbaGlobal);
  EXPECT_EQ(Grh::from(buf + 8).ip_ver(), 6);
  EXPECT_EQ(Grh::from(buf + 8).next_hdr(), 0x1b);
  h.has_grh = false;
  EXPECT_EQ(write_headers(buf, h), 20u);
  EXPECT_EQ(Lrh::from(buf).lnh(), kLnhIbaLocal);
}

TEST(WirePacket, GivenLargestPacketExpectItFitsKMaxPacket) {
  const PacketHeaders h = full_headers(static_cast<uint8_t>(Opcode::kRcWriteOnlyImm), true);
  const std::vector<uint8_t> p = build(h, pattern(kMaxPayload));
  EXPECT_LE(p.size(), kMaxPacket);
  EXPECT_EQ(parse_packet(p.data(), p.size(), nullptr), ParseError::kOk);
}

TEST(WirePacket, GivenTruncationAtEveryLengthExpectRejected) {
  for (bool has_grh : {false, true}) {
    const std::vector<uint8_t> p =
        build(full_headers(static_cast<uint8_t>(Opcode::kUdSendOnlyImm), has_grh), pattern(37));
    for (size_t n = 0; n < p.size(); ++n) {
      const ParseError e = parse_exact(p, n);
      EXPECT_NE(e, ParseError::kOk) << "length " << n;
      EXPECT_EQ(e, ParseError::kTooShort) << "length " << n;
      EXPECT_NE(parse_exact(p, n, false), ParseError::kOk) << "length " << n;
    }
    EXPECT_EQ(parse_exact(p, p.size()), ParseError::kOk);
  }
}

TEST(WirePacket, GivenTrailingBytesExpectBadLength) {
  std::vector<uint8_t> p = build(full_headers(0x04, false), pattern(8));
  p.push_back(0);
  EXPECT_EQ(parse_exact(p, p.size()), ParseError::kBadLength);
}

TEST(WirePacket, GivenRawLnhExpectBadLnh) {
  for (int lnh : {0, 1}) {
    std::vector<uint8_t> p = build(full_headers(0x04, false), pattern(8));
    Lrh l = Lrh::from(p.data());
    l.set_lnh(static_cast<uint8_t>(lnh));
    l.to(p.data());
    reseal(p);
    EXPECT_EQ(parse_exact(p, p.size()), ParseError::kBadLnh);
  }
}

TEST(WirePacket, GivenLocalLnhOnGlobalPacketExpectRejected) {
  std::vector<uint8_t> p = build(full_headers(0x04, true), pattern(8));
  Lrh l = Lrh::from(p.data());
  l.set_lnh(kLnhIbaLocal);
  l.to(p.data());
  reseal(p);  // now consistent CRCs for a local packet whose "BTH" is the GRH
  EXPECT_EQ(parse_exact(p, p.size()), ParseError::kBadVersion);  // GRH byte 1 as TVer
}

TEST(WirePacket, GivenPktLenDisagreeingWithBufferExpectRejected) {
  const std::vector<uint8_t> good = build(full_headers(0x04, false), pattern(8));
  for (int delta : {-2, -1, 1, 2}) {
    std::vector<uint8_t> p = good;
    Lrh l = Lrh::from(p.data());
    l.set_pkt_len(static_cast<uint16_t>(l.pkt_len() + delta));
    l.to(p.data());
    EXPECT_EQ(parse_exact(p, p.size()), delta < 0 ? ParseError::kBadLength : ParseError::kTooShort);
  }
}

TEST(WirePacket, GivenPktLenTooSmallForOpcodeHeadersExpectBadLength) {
  // An RDMA WRITE Only whose PktLen ends right after the BTH: no room for the RETH.
  PacketHeaders h = full_headers(static_cast<uint8_t>(Opcode::kRcWriteOnly), false);
  std::vector<uint8_t> buf(kMaxPacket);
  write_headers(buf.data(), h);
  buf.resize(finalize_packet(buf.data(), Lrh::kSize + Bth::kSize, 0));
  EXPECT_EQ(parse_exact(buf, buf.size()), ParseError::kBadLength);
  // Below the smallest IBA packet (LRH + BTH + ICRC) at all.
  std::vector<uint8_t> tiny = build(full_headers(0x04, false), {});
  tiny.resize(Lrh::kSize + kIcrcSize + kVcrcSize);
  Lrh l = Lrh::from(tiny.data());
  l.set_pkt_len(3);
  l.to(tiny.data());
  EXPECT_EQ(parse_exact(tiny, tiny.size()), ParseError::kBadLength);
}

TEST(WirePacket, GivenPayloadOnOpcodeWithoutPayloadExpectBadLength) {
  for (Opcode op : {Opcode::kRcAcknowledge, Opcode::kRcReadRequest, Opcode::kRcFetchAdd,
                    Opcode::kRcAtomicAcknowledge}) {
    const std::vector<uint8_t> p = build(full_headers(static_cast<uint8_t>(op), false), pattern(4));
    EXPECT_EQ(parse_exact(p, p.size()), ParseError::kBadLength) << to_string(op);
  }
}

TEST(WirePacket, GivenBadPadCountExpectBadPad) {
  // Pad larger than the payload-plus-pad area.
  std::vector<uint8_t> p = build(full_headers(0x04, false), {});
  Bth b = Bth::from(p.data() + 8);
  b.set_pad_cnt(1);
  b.to(p.data() + 8);
  reseal(p);
  EXPECT_EQ(parse_exact(p, p.size()), ParseError::kBadPad);
  // Any pad on an opcode without payload.
  p = build(full_headers(static_cast<uint8_t>(Opcode::kRcAcknowledge), false), {});
  b = Bth::from(p.data() + 8);
  b.set_pad_cnt(3);
  b.to(p.data() + 8);
  reseal(p);
  EXPECT_EQ(parse_exact(p, p.size()), ParseError::kBadPad);
  // A pad the payload area can hold is accepted and shortens the payload.
  p = build(full_headers(0x04, false), pattern(4));
  b = Bth::from(p.data() + 8);
  b.set_pad_cnt(3);
  b.to(p.data() + 8);
  reseal(p);
  PacketView v;
  ASSERT_EQ(parse_packet(p.data(), p.size(), &v), ParseError::kOk);
  EXPECT_EQ(v.payload_len, 1u);
}

TEST(WirePacket, GivenEveryInvalidOpcodeExpectBadOpcode) {
  for (unsigned op = 0; op < 256; ++op) {
    if (opcode_info(static_cast<uint8_t>(op)).valid) continue;
    for (bool has_grh : {false, true}) {
      const std::vector<uint8_t> p =
          build(full_headers(static_cast<uint8_t>(op), has_grh), pattern(16));
      EXPECT_EQ(parse_exact(p, p.size()), ParseError::kBadOpcode) << std::hex << op;
    }
  }
}

TEST(WirePacket, GivenPayloadAboveMaxExpectPayloadTooLong) {
  const std::vector<uint8_t> ok = build(full_headers(0x04, false), pattern(kMaxPayload));
  EXPECT_EQ(parse_exact(ok, ok.size()), ParseError::kOk);
  for (size_t n : {kMaxPayload + 1, kMaxPayload + 4, size_t{8000}}) {
    const std::vector<uint8_t> p = build(full_headers(0x04, false), pattern(n));
    EXPECT_EQ(parse_exact(p, p.size()), ParseError::kPayloadTooLong) << n;
  }
}

TEST(WirePacket, GivenWrongVersionsExpectBadVersion) {
  auto edit = [](bool has_grh, auto&& f) {
    std::vector<uint8_t> p = build(full_headers(0x04, has_grh), pattern(8));
    f(p.data());
    reseal(p);
    return parse_exact(p, p.size());
  };
  EXPECT_EQ(edit(false, [](uint8_t* d) { d[0] |= 0x01; }), ParseError::kBadVersion);      // LVer
  EXPECT_EQ(edit(false, [](uint8_t* d) { d[8 + 1] |= 0x01; }), ParseError::kBadVersion);  // TVer
  EXPECT_EQ(edit(true, [](uint8_t* d) { d[48 + 1] |= 0x08; }), ParseError::kBadVersion);  // TVer
  EXPECT_EQ(edit(true, [](uint8_t* d) { d[8] = static_cast<uint8_t>((d[8] & 0x0f) | 0x40); }),
            ParseError::kBadVersion);                                               // IPVer 4
  EXPECT_EQ(edit(true, [](uint8_t* d) { d[8 + 6] = 0x11; }), ParseError::kBadLnh);  // NxtHdr
  EXPECT_EQ(edit(true, [](uint8_t* d) { store_be16(d + 8 + 4, load_be16(d + 8 + 4) + 4); }),
            ParseError::kBadLength);  // PayLen
}

TEST(WirePacket, GivenCorruptedCrcBytesExpectCrcErrors) {
  std::vector<uint8_t> p = build(full_headers(0x04, true), pattern(20));
  const size_t vcrc_off = p.size() - kVcrcSize;
  p[vcrc_off] ^= 1;
  EXPECT_EQ(parse_exact(p, p.size()), ParseError::kBadVcrc);
  p[vcrc_off] ^= 1;
  p[vcrc_off - 1] ^= 1;  // ICRC byte; VCRC covers it
  EXPECT_EQ(parse_exact(p, p.size()), ParseError::kBadVcrc);
  store_vcrc(p.data() + vcrc_off, compute_vcrc(p.data(), vcrc_off));
  EXPECT_EQ(parse_exact(p, p.size()), ParseError::kBadIcrc);
  EXPECT_EQ(parse_exact(p, p.size(), false), ParseError::kOk);
}

TEST(WirePacket, GivenRandomBytesExpectNoCrashAndConsistentViews) {
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<size_t> length(0, 300);
  int accepted = 0;
  for (int i = 0; i < 200000; ++i) {
    std::vector<uint8_t> p(length(rng));
    for (auto& b : p) b = static_cast<uint8_t>(byte(rng));
    // Half the time make LRH:PktLen agree with the length so deeper checks run.
    if (p.size() >= Lrh::kSize + 2 && (i & 1)) {
      const size_t n = std::max((p.size() - 2) & ~size_t{3}, Lrh::kSize);
      p.resize(n + 2);
      Lrh l = Lrh::from(p.data());
      l.set_pkt_len(static_cast<uint16_t>(n / 4));
      l.to(p.data());
    }
    std::unique_ptr<uint8_t[]> copy(new uint8_t[p.size() + 1]);
    if (!p.empty()) std::memcpy(copy.get(), p.data(), p.size());
    PacketView v;
    if (parse_packet(copy.get(), p.size(), &v, (i & 2) != 0) == ParseError::kOk) {
      ++accepted;
      ASSERT_TRUE(v.info && v.info->valid);
      ASSERT_EQ(v.header_len + v.payload_len + v.bth().pad_cnt() + 6, v.len);
      ASSERT_LE(v.payload_len, kMaxPayload);
      (void)describe_packet(v);
    }
  }
  // With CRC checks off some random packets are structurally valid; the
  // point is that none crashed and every accepted one is self-consistent.
  RecordProperty("accepted", accepted);
}

TEST(WirePacket, GivenMutatedValidPacketsExpectNoCrashAndConsistentViews) {
  std::mt19937 rng(7);
  const std::vector<uint8_t> ops = valid_opcodes();
  std::uniform_int_distribution<size_t> pick(0, ops.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int i = 0; i < 50000; ++i) {
    std::vector<uint8_t> p = build(full_headers(ops[pick(rng)], i & 1), pattern(i % 70));
    const int edits = 1 + i % 4;
    for (int e = 0; e < edits; ++e) {
      std::uniform_int_distribution<size_t> where(0, p.size() - 1);
      p[where(rng)] = static_cast<uint8_t>(byte(rng));
    }
    if (i & 2) reseal(p);
    PacketView v;
    const ParseError err = parse_packet(p.data(), p.size(), &v, (i & 4) != 0);
    if (err == ParseError::kOk) {
      ASSERT_EQ(v.header_len + v.payload_len + v.bth().pad_cnt() + 6, v.len);
    }
  }
}

TEST(WirePacket, GivenNullOutExpectValidationOnly) {
  const std::vector<uint8_t> p = build(full_headers(0x04, false), pattern(8));
  EXPECT_EQ(parse_packet(p.data(), p.size(), nullptr), ParseError::kOk);
  EXPECT_EQ(parse_packet(nullptr, 0, nullptr), ParseError::kTooShort);
}

TEST(WirePacket, GivenFailedParseExpectViewReset) {
  std::vector<uint8_t> p = build(full_headers(0x04, false), pattern(8));
  PacketView v;
  ASSERT_EQ(parse_packet(p.data(), p.size(), &v), ParseError::kOk);
  p.back() ^= 1;
  EXPECT_EQ(parse_packet(p.data(), p.size(), &v), ParseError::kBadVcrc);
  EXPECT_EQ(v.info, nullptr);
  EXPECT_EQ(v.data, nullptr);
  EXPECT_EQ(v.reth().rkey(), 0u);  // accessors on an empty view are safe
  EXPECT_EQ(v.payload(), nullptr);
}

TEST(WirePacket, GivenParseErrorsExpectDistinctNames) {
  std::set<std::string> names;
  for (int e = 0; e <= static_cast<int>(ParseError::kBadVersion); ++e) {
    names.insert(to_string(static_cast<ParseError>(e)));
  }
  EXPECT_EQ(names.size(), 10u);
  EXPECT_STREQ(to_string(ParseError::kBadIcrc), "BAD_ICRC");
}

TEST(WirePacket, GivenPacketsExpectOneLineDescriptions) {
  PacketHeaders h = full_headers(static_cast<uint8_t>(Opcode::kRcSendOnly), false);
  h.bth.set_psn(0);
  std::vector<uint8_t> p = build(h, pattern(64));
  PacketView v;
  ASSERT_EQ(parse_packet(p.data(), p.size(), &v), ParseError::kOk);
  const std::string s = describe_packet(v);
  EXPECT_EQ(s.rfind("RC_SEND_ONLY dlid=3 slid=1 qpn=0x000012 psn=0x000000 len=64", 0), 0u) << s;
  EXPECT_NE(s.find(" se"), std::string::npos) << s;
  EXPECT_EQ(s.find('\n'), std::string::npos);

  p = build(full_headers(static_cast<uint8_t>(Opcode::kRcAcknowledge), false), {});
  ASSERT_EQ(parse_packet(p.data(), p.size(), &v), ParseError::kOk);
  EXPECT_NE(describe_packet(v).find("aeth=NAK(REMOTE_ACCESS_ERROR) msn=0x00fedc"),
            std::string::npos)
      << describe_packet(v);

  p = build(full_headers(static_cast<uint8_t>(Opcode::kUdSendOnlyImm), true), pattern(3));
  ASSERT_EQ(parse_packet(p.data(), p.size(), &v), ParseError::kOk);
  const std::string ud = describe_packet(v);
  EXPECT_NE(ud.find("qkey=0x80010000 src_qp=0x000077"), std::string::npos) << ud;
  EXPECT_NE(ud.find("imm=0xdeadbeef"), std::string::npos) << ud;
  EXPECT_NE(ud.find("dgid=b0b1:b2b3"), std::string::npos) << ud;

  p = build(full_headers(static_cast<uint8_t>(Opcode::kRcCompareSwap), false), {});
  ASSERT_EQ(parse_packet(p.data(), p.size(), &v), ParseError::kOk);
  EXPECT_NE(describe_packet(v).find("compare=0x2122232425262728"), std::string::npos);

  EXPECT_EQ(describe_packet(PacketView{}), "INVALID len=0");
}

}  // namespace
}  // namespace ibemu::wire
