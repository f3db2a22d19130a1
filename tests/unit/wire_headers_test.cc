// Header accessors: every field round-trips at its extreme values, lands on
// the bits the spec gives it (IBA 7.7, 8.3, 9.2, 9.3) and leaves its
// neighbours alone.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "transport/wire/aeth.h"
#include "transport/wire/atomic_ack_eth.h"
#include "transport/wire/atomic_eth.h"
#include "transport/wire/bth.h"
#include "transport/wire/byte_order.h"
#include "transport/wire/deth.h"
#include "transport/wire/grh.h"
#include "transport/wire/ieth.h"
#include "transport/wire/immdt.h"
#include "transport/wire/lrh.h"
#include "transport/wire/reth.h"

namespace ibemu::wire {
namespace {

// One header field: how to set and get it, its largest value and the
// (byte, bit mask) pairs it occupies.
template <typename H>
struct Field {
  const char* name;
  void (*set)(H&, uint64_t);
  uint64_t (*get)(const H&);
  uint64_t max;
  std::vector<std::pair<size_t, uint8_t>> bits;
};

// clang-format off
#define FIELD(H, f, maxv, ...)                                                      \
  Field<H>{#f,                                                                      \
           [](H& h, uint64_t v) { h.set_##f(static_cast<decltype(h.f())>(v)); },    \
           [](const H& h) { return static_cast<uint64_t>(h.f()); }, maxv, __VA_ARGS__}
// clang-format on

template <typename H>
std::array<uint8_t, sizeof(H)> mask_of(const Field<H>& f) {
  std::array<uint8_t, sizeof(H)> m{};
  for (auto [byte, bits] : f.bits) m[byte] |= bits;
  return m;
}

template <typename H>
void expect_fields(const std::vector<Field<H>>& fields) {
  std::array<uint8_t, sizeof(H)> seen{};
  for (const Field<H>& f : fields) {
    SCOPED_TRACE(f.name);
    const auto m = mask_of(f);

    // Given a zeroed header, setting all ones sets exactly the field's bits.
    H z{};
    f.set(z, ~uint64_t{0});
    for (size_t i = 0; i < sizeof(H); ++i) EXPECT_EQ(z.raw[i], m[i]) << "byte " << i;
    EXPECT_EQ(f.get(z), f.max);

    // Given an all-ones header, the field reads as max; clearing it clears only it.
    H o;
    std::memset(o.raw, 0xff, sizeof o.raw);
    EXPECT_EQ(f.get(o), f.max);
    f.set(o, 0);
    for (size_t i = 0; i < sizeof(H); ++i) {
      EXPECT_EQ(o.raw[i], static_cast<uint8_t>(~m[i])) << "byte " << i;
    }
    EXPECT_EQ(f.get(o), 0u);

    // A value with no symmetry round-trips (catches swapped bytes).
    H p{};
    const uint64_t pattern = 0x8d2b4f1e6a39c577ull & f.max;
    f.set(p, pattern);
    EXPECT_EQ(f.get(p), pattern);

    for (size_t i = 0; i < sizeof(H); ++i) {
      EXPECT_EQ(seen[i] & m[i], 0) << "overlaps another field at byte " << i;
      seen[i] |= m[i];
    }
  }
}

TEST(WireByteOrder, GivenValuesExpectBigEndianBytes) {
  uint8_t b[8] = {};
  store_be16(b, 0x0102);
  EXPECT_EQ(b[0], 0x01);
  EXPECT_EQ(b[1], 0x02);
  EXPECT_EQ(load_be16(b), 0x0102);
  store_be24(b, 0xff010203);  // top byte ignored
  EXPECT_EQ(b[0], 0x01);
  EXPECT_EQ(b[2], 0x03);
  EXPECT_EQ(load_be24(b), 0x010203u);
  store_be32(b, 0x01020304);
  EXPECT_EQ(b[0], 0x01);
  EXPECT_EQ(b[3], 0x04);
  EXPECT_EQ(load_be32(b), 0x01020304u);
  store_be64(b, 0x0102030405060708ull);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(b[i], i + 1);
  EXPECT_EQ(load_be64(b), 0x0102030405060708ull);
}

TEST(WireByteOrder, GivenUnalignedBufferExpectSameResults) {
  alignas(8) uint8_t buf[16] = {};
  store_be64(buf + 3, 0xfedcba9876543210ull);
  EXPECT_EQ(load_be64(buf + 3), 0xfedcba9876543210ull);
  store_be32(buf + 1, 0xdeadbeef);
  EXPECT_EQ(load_be32(buf + 1), 0xdeadbeefu);
  store_le32(buf + 5, 0x11223344);
  EXPECT_EQ(buf[5], 0x44);
  EXPECT_EQ(load_le32(buf + 5), 0x11223344u);
  store_le16(buf + 9, 0xabcd);
  EXPECT_EQ(buf[9], 0xcd);
  EXPECT_EQ(load_le16(buf + 9), 0xabcd);
}

TEST(WireLrh, GivenEachFieldExpectItsBitsOnly) {
  expect_fields<Lrh>({
      FIELD(Lrh, vl, 0xf, {{0, 0xf0}}),
      FIELD(Lrh, lver, 0xf, {{0, 0x0f}}),
      FIELD(Lrh, sl, 0xf, {{1, 0xf0}}),
      FIELD(Lrh, lnh, 0x3, {{1, 0x03}}),
      FIELD(Lrh, dlid, 0xffff, {{2, 0xff}, {3, 0xff}}),
      FIELD(Lrh, pkt_len, 0x7ff, {{4, 0x07}, {5, 0xff}}),
      FIELD(Lrh, slid, 0xffff, {{6, 0xff}, {7, 0xff}}),
  });
}

TEST(WireLrh, GivenFieldsExpectSpecLayout) {
  Lrh h;
  h.set_vl(0xa);
  h.set_lver(0x5);
  h.set_sl(0x3);
  h.set_lnh(2);
  h.set_dlid(0x1234);
  h.set_pkt_len(0x456);
  h.set_slid(0xbeef);
  const uint8_t expected[8] = {0xa5, 0x32, 0x12, 0x34, 0x04, 0x56, 0xbe, 0xef};
  EXPECT_EQ(0, std::memcmp(h.raw, expected, 8));
  uint8_t out[8];
  h.to(out);
  EXPECT_EQ(0, std::memcmp(Lrh::from(out).raw, expected, 8));
}

TEST(WireGrh, GivenEachFieldExpectItsBitsOnly) {
  expect_fields<Grh>({
      FIELD(Grh, ip_ver, 0xf, {{0, 0xf0}}),
      FIELD(Grh, tclass, 0xff, {{0, 0x0f}, {1, 0xf0}}),
      FIELD(Grh, flow_label, 0xfffff, {{1, 0x0f}, {2, 0xff}, {3, 0xff}}),
      FIELD(Grh, pay_len, 0xffff, {{4, 0xff}, {5, 0xff}}),
      FIELD(Grh, next_hdr, 0xff, {{6, 0xff}}),
      FIELD(Grh, hop_limit, 0xff, {{7, 0xff}}),
  });
}

TEST(WireGrh, GivenGidsExpectBytes8To23And24To39) {
  Gid s, d;
  for (int i = 0; i < 16; ++i) {
    s[i] = static_cast<uint8_t>(0x10 + i);
    d[i] = static_cast<uint8_t>(0xe0 + i);
  }
  Grh h;
  h.set_sgid(s);
  h.set_dgid(d.data());
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(h.raw[8 + i], s[i]);
    EXPECT_EQ(h.raw[24 + i], d[i]);
  }
  EXPECT_EQ(h.sgid(), s);
  EXPECT_EQ(h.dgid(), d);
  uint8_t out[16];
  h.sgid(out);
  EXPECT_EQ(0, std::memcmp(out, s.data(), 16));
  h.dgid(out);
  EXPECT_EQ(0, std::memcmp(out, d.data(), 16));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(h.raw[i], 0) << "fixed fields untouched";
}

TEST(WireBth, GivenEachFieldExpectItsBitsOnly) {
  expect_fields<Bth>({
      FIELD(Bth, opcode, 0xff, {{0, 0xff}}),
      FIELD(Bth, se, 1, {{1, 0x80}}),
      FIELD(Bth, mig_req, 1, {{1, 0x40}}),
      FIELD(Bth, pad_cnt, 3, {{1, 0x30}}),
      FIELD(Bth, tver, 0xf, {{1, 0x0f}}),
      FIELD(Bth, pkey, 0xffff, {{2, 0xff}, {3, 0xff}}),
      FIELD(Bth, fecn, 1, {{4, 0x80}}),
      FIELD(Bth, becn, 1, {{4, 0x40}}),
      FIELD(Bth, dest_qp, 0xffffff, {{5, 0xff}, {6, 0xff}, {7, 0xff}}),
      FIELD(Bth, ack_req, 1, {{8, 0x80}}),
      FIELD(Bth, psn, 0xffffff, {{9, 0xff}, {10, 0xff}, {11, 0xff}}),
  });
}

TEST(WireBth, GivenResv8aExpectWholeByteFourIncludingFecnBecn) {
  Bth h;
  h.set_resv8a(0xc0);
  EXPECT_TRUE(h.fecn());
  EXPECT_TRUE(h.becn());
  EXPECT_EQ(h.raw[4], 0xc0);
  h.set_fecn(false);
  EXPECT_EQ(h.resv8a(), 0x40);
}

TEST(WireBth, GivenFieldsExpectSpecLayout) {
  Bth h;
  h.set_opcode(0x0a);
  h.set_se(true);
  h.set_pad_cnt(2);
  h.set_pkey(0xffff);
  h.set_dest_qp(0x123456);
  h.set_ack_req(true);
  h.set_psn(0xabcdef);
  const uint8_t expected[12] = {0x0a, 0xa0, 0xff, 0xff, 0x00, 0x12,
                                0x34, 0x56, 0x80, 0xab, 0xcd, 0xef};
  EXPECT_EQ(0, std::memcmp(h.raw, expected, 12));
}

TEST(WireReth, GivenEachFieldExpectItsBitsOnly) {
  expect_fields<Reth>({
      FIELD(
          Reth, va, ~uint64_t{0},
          {{0, 0xff}, {1, 0xff}, {2, 0xff}, {3, 0xff}, {4, 0xff}, {5, 0xff}, {6, 0xff}, {7, 0xff}}),
      FIELD(Reth, rkey, 0xffffffff, {{8, 0xff}, {9, 0xff}, {10, 0xff}, {11, 0xff}}),
      FIELD(Reth, dma_len, 0xffffffff, {{12, 0xff}, {13, 0xff}, {14, 0xff}, {15, 0xff}}),
  });
  Reth h;
  h.set_va(0x0102030405060708ull);
  h.set_rkey(0x090a0b0c);
  h.set_dma_len(0x0d0e0f10);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(h.raw[i], i + 1);
}

TEST(WireAtomicEth, GivenEachFieldExpectItsBitsOnly) {
  auto bytes = [](size_t from, size_t n) {
    std::vector<std::pair<size_t, uint8_t>> v;
    for (size_t i = 0; i < n; ++i) v.emplace_back(from + i, 0xff);
    return v;
  };
  expect_fields<AtomicEth>({
      FIELD(AtomicEth, va, ~uint64_t{0}, bytes(0, 8)),
      FIELD(AtomicEth, rkey, 0xffffffff, bytes(8, 4)),
      FIELD(AtomicEth, swap_add, ~uint64_t{0}, bytes(12, 8)),
      FIELD(AtomicEth, compare, ~uint64_t{0}, bytes(20, 8)),
  });
  AtomicEth h;
  h.set_swap_add(0x0102030405060708ull);
  EXPECT_EQ(h.raw[12], 0x01);
  EXPECT_EQ(h.raw[19], 0x08);
}

TEST(WireAtomicAckEth, GivenOrigDataExpectAllEightBytesBigEndian) {
  expect_fields<AtomicAckEth>({
      FIELD(
          AtomicAckEth, orig_data, ~uint64_t{0},
          {{0, 0xff}, {1, 0xff}, {2, 0xff}, {3, 0xff}, {4, 0xff}, {5, 0xff}, {6, 0xff}, {7, 0xff}}),
  });
  AtomicAckEth h;
  h.set_orig_data(0x8000000000000001ull);
  EXPECT_EQ(h.raw[0], 0x80);
  EXPECT_EQ(h.raw[7], 0x01);
}

TEST(WireAeth, GivenEachFieldExpectItsBitsOnly) {
  expect_fields<Aeth>({
      FIELD(Aeth, syndrome, 0xff, {{0, 0xff}}),
      FIELD(Aeth, msn, 0xffffff, {{1, 0xff}, {2, 0xff}, {3, 0xff}}),
  });
}

TEST(WireDeth, GivenEachFieldExpectItsBitsOnlyAndByteFourReserved) {
  expect_fields<Deth>({
      FIELD(Deth, qkey, 0xffffffff, {{0, 0xff}, {1, 0xff}, {2, 0xff}, {3, 0xff}}),
      FIELD(Deth, src_qp, 0xffffff, {{5, 0xff}, {6, 0xff}, {7, 0xff}}),
  });
}

TEST(WireImmDt, GivenWireBytesExpectImmKeepsNetworkOrder) {
  const uint8_t wire[4] = {0x12, 0x34, 0x56, 0x78};
  const ImmDt h = ImmDt::from(wire);
  uint32_t as_host;
  std::memcpy(&as_host, wire, 4);
  EXPECT_EQ(h.imm(), as_host);
  EXPECT_EQ(h.imm_be(), 0x12345678u);
  ImmDt back;
  back.set_imm(h.imm());
  EXPECT_EQ(0, std::memcmp(back.raw, wire, 4));
}

TEST(WireIeth, GivenRkeyExpectBigEndian) {
  expect_fields<Ieth>({
      FIELD(Ieth, rkey, 0xffffffff, {{0, 0xff}, {1, 0xff}, {2, 0xff}, {3, 0xff}}),
  });
}

TEST(WireAethSyndrome, GivenEachTypeAndValueExpectEncodeDecodeRoundTrip) {
  for (uint8_t v = 0; v < 32; ++v) {
    EXPECT_EQ(make_ack_syndrome(v), v);
    EXPECT_EQ(aeth_type(make_ack_syndrome(v)), AckType::kAck);
    EXPECT_EQ(aeth_value(make_ack_syndrome(v)), v);
    EXPECT_EQ(make_rnr_nak_syndrome(v), 0x20 | v);
    EXPECT_EQ(aeth_type(make_rnr_nak_syndrome(v)), AckType::kRnrNak);
    EXPECT_EQ(aeth_value(make_rnr_nak_syndrome(v)), v);
  }
  const NakCode codes[] = {NakCode::kPsnSequenceError, NakCode::kInvalidRequest,
                           NakCode::kRemoteAccessError, NakCode::kRemoteOperationalError,
                           NakCode::kInvalidRdRequest};
  for (NakCode c : codes) {
    const uint8_t s = make_nak_syndrome(c);
    EXPECT_EQ(s, 0x60 | static_cast<uint8_t>(c));
    EXPECT_EQ(aeth_type(s), AckType::kNak);
    EXPECT_EQ(static_cast<NakCode>(aeth_value(s)), c);
    EXPECT_STRNE(to_string(c), "RESERVED");
  }
}

TEST(WireAethSyndrome, GivenAllSyndromesExpectTypeFromBits6And5ReservedBit7Ignored) {
  for (unsigned s = 0; s < 256; ++s) {
    const AckType expected[] = {AckType::kAck, AckType::kRnrNak, AckType::kReserved, AckType::kNak};
    EXPECT_EQ(aeth_type(static_cast<uint8_t>(s)), expected[(s >> 5) & 3]) << s;
    EXPECT_EQ(aeth_value(static_cast<uint8_t>(s)), s & 0x1f);
  }
  EXPECT_STREQ(to_string(AckType::kRnrNak), "RNR_NAK");
  EXPECT_STREQ(to_string(static_cast<NakCode>(9)), "RESERVED");
}

TEST(WireHeaders, GivenAnyHeaderExpectFromAndToAreExactCopies) {
  uint8_t src[40], dst[40];
  for (int i = 0; i < 40; ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  auto check = [&](auto h) {
    std::memset(dst, 0, sizeof dst);
    h.to(dst);
    EXPECT_EQ(0, std::memcmp(src, dst, sizeof h.raw));
  };
  check(Lrh::from(src));
  check(Grh::from(src));
  check(Bth::from(src));
  check(Reth::from(src));
  check(Aeth::from(src));
  check(AtomicEth::from(src));
  check(AtomicAckEth::from(src));
  check(Deth::from(src));
  check(ImmDt::from(src));
  check(Ieth::from(src));
}

}  // namespace
}  // namespace ibemu::wire
