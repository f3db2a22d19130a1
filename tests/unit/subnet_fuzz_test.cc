// Every MAD field is untrusted: random and mutated SMPs must never crash the
// subnet, and malformed ones are dropped.
#include <gtest/gtest.h>

#include <random>

#include "tests/unit/subnet_test_util.h"

namespace ibemu {
namespace {

using mad::AttrId;

TEST(SubnetFuzz, WrongLengthsAreDropped) {
  Subnet subnet(testing::two_by_two());
  std::vector<uint8_t> buf(512, 0);
  mad::Smp s = testing::dr_get(AttrId::kNodeInfo, 0, {});
  std::copy(s.bytes.begin(), s.bytes.end(), buf.begin());
  for (size_t len : {0, 1, 23, 24, 64, 255, 257, 512})
    EXPECT_FALSE(subnet.process_smp(PortRef{0, 1}, buf.data(), len)) << len;
  EXPECT_FALSE(subnet.process_smp(PortRef{0, 1}, nullptr, 256));
  EXPECT_TRUE(subnet.process_smp(PortRef{0, 1}, buf.data(), 256));
}

TEST(SubnetFuzz, RandomBytes) {
  Subnet subnet(testing::two_by_two());
  std::mt19937_64 rng(1234);
  std::array<uint8_t, 256> buf{};
  for (int i = 0; i < 20000; ++i) {
    for (auto& b : buf) b = uint8_t(rng());
    const PortRef from{int(rng() % 3) - (rng() % 8 == 0), int(rng() % 4)};
    subnet.process_smp(from, buf.data(), buf.size(), uint16_t(rng()));
  }
  SUCCEED();
}

TEST(SubnetFuzz, MutatedValidSmps) {
  // Start from well-formed SMPs so the fuzzing reaches the SMA and the
  // routing code, then flip bytes that matter: header, hop fields, paths,
  // DrSLID/DrDLID and the attribute data.
  Subnet subnet(testing::two_by_two());
  std::mt19937_64 rng(99);
  const AttrId attrs[] = {AttrId::kNodeInfo,
                          AttrId::kNodeDescription,
                          AttrId::kSwitchInfo,
                          AttrId::kPortInfo,
                          AttrId::kGuidInfo,
                          AttrId::kPKeyTable,
                          AttrId::kLinearForwardingTable,
                          AttrId::kSmInfo};
  int answered = 0;
  for (int i = 0; i < 50000; ++i) {
    std::vector<uint8_t> path;
    const size_t hops = rng() % 4;
    for (size_t h = 0; h < hops; ++h) path.push_back(uint8_t(h == 0 ? 1 : rng() % 6));
    mad::Smp s = testing::dr_get(attrs[rng() % 8], uint32_t(rng() % 6), path, i);
    if (rng() % 2) s.set_method(rng() % 4 ? mad::Method::kSet : mad::Method(rng()));
    if (rng() % 3 == 0) s.set_mgmt_class(mad::MgmtClass::kSubnLid);
    for (auto& b : s.bytes)
      if (rng() % 64 == 0) b = uint8_t(rng());
    const int mutations = int(rng() % 4);
    for (int m = 0; m < mutations; ++m) s.bytes[rng() % 256] = uint8_t(rng());
    for (int m = 0; m < 8; ++m) s.bytes[64 + rng() % 64] = uint8_t(rng());
    const PortRef from{int(rng() % 2), int(1 + rng() % 2)};
    auto r = subnet.process_smp(from, s.bytes.data(), s.bytes.size(),
                                uint16_t(rng() % 2 ? 0xffff : rng() % 32));
    if (r) ++answered;
  }
  EXPECT_GT(answered, 1000);  // the fuzzing did reach the SMAs
  // Whatever random Sets did, the subnet still answers sane queries.
  for (const PortRef& p : subnet.ports()) {
    const PortAttributes a = subnet.port(p);
    EXPECT_LE(int(a.state), 4);
  }
  (void)subnet.describe().dump();
}

}  // namespace
}  // namespace ibemu
