// ibemu-sm's partitions: opensm's partitions.conf syntax, the P_Key table
// each end port gets from it, and a sweep that writes those tables into the
// SMAs of an in-process subnet (IBA 10.9, 14.2.5.7).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "sm-lite/control_transport.h"
#include "sm-lite/partitions.h"
#include "sm-lite/subnet_manager.h"
#include "tests/unit/subnet_test_util.h"

namespace ibemu {
namespace {

using sm::EndPort;
using sm::Membership;
using sm::parse_partitions;
using sm::pkey_table;
using Table = std::vector<uint16_t>;

constexpr uint64_t kFullPort = 0x0002c90300000101ull;  // ibemu0 port 1 of two_by_two()

const char* const kStorage = R"(# the default partition, everyone a full member
Default=0x7fff, ipoib : ALL=full ;
storage=0x0001, ipoib, mtu=5 :
    ALL=limited,            # everyone may talk to the server ...
    0x0002c90300000101=full # ... which is a full member
;)";

TEST(Partitions, GivenOpensmsSyntaxExpectEachDefinitionWithItsMembers) {
  const auto parts = parse_partitions(kStorage);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].name, "Default");
  EXPECT_EQ(parts[0].pkey, 0x7fff);
  ASSERT_EQ(parts[1].members.size(), 2u);
  EXPECT_EQ(parts[1].pkey, 0x0001);
  EXPECT_EQ(parts[1].members[0].kind, sm::PartitionMember::Kind::kAll);
  EXPECT_EQ(parts[1].members[0].membership, Membership::kLimited);
  EXPECT_EQ(parts[1].members[1].guid, kFullPort);
  EXPECT_EQ(parts[1].members[1].membership, Membership::kFull);
  // A P_Key given with bit 15 names the partition; membership is per member.
  EXPECT_EQ(parse_partitions("p=0x8002:SELF;")[0].pkey, 0x0002);
  // defmember= for members without '='; NONE is nobody.
  const auto d = parse_partitions("p=3, defmember=full : ALL_CAS, NONE ;");
  ASSERT_EQ(d[0].members.size(), 1u);
  EXPECT_EQ(d[0].members[0].membership, Membership::kFull);
  EXPECT_TRUE(parse_partitions("  # nothing but a comment\n").empty());
}

TEST(Partitions, GivenWhatIsNoPartitionExpectAnErrorNamingTheLine) {
  auto error = [](const std::string& text) {
    try {
      parse_partitions(text);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("a=1 : ALL ;\n\nb=0 : ALL ;"),
            "line 3: partition \"b\" needs a P_Key (Name=0x0001 .. 0x7fff)");
  EXPECT_EQ(error("a=0x8000 : ALL ;").substr(0, 7), "line 1:");
  EXPECT_EQ(error("a=0x10000 : ALL ;").substr(0, 7), "line 1:");
  EXPECT_EQ(error("a : ALL ;").substr(0, 7), "line 1:");
  EXPECT_EQ(error("a=1 ALL ;"), "line 1: a partition is \"Name=PKey : members ;\" (no ':')");
  EXPECT_EQ(error("a=1 : ALL=owner ;"),
            "line 1: membership \"owner\" is not full, limited or both");
  EXPECT_EQ(error("a=1 : 0x0 ;").substr(0, 24), "line 1: member \"0x0\" is ");
  EXPECT_EQ(error("a=1 : bob ;").substr(0, 24), "line 1: member \"bob\" is ");
  EXPECT_EQ(error("\na=1 : ALL"), "line 2: a partition definition ends with ';'");
}

TEST(Partitions, GivenMembershipsExpectTheTableOfEachPort) {
  const auto parts = parse_partitions(kStorage);
  EXPECT_EQ(pkey_table(parts, EndPort{kFullPort}, 4), (Table{0xffff, 0x8001, 0, 0}));
  EXPECT_EQ(pkey_table(parts, EndPort{kFullPort + 0x100}, 4), (Table{0xffff, 0x0001, 0, 0}));
  // Without the default partition in the file: everyone limited, the SM's
  // port full (opensm's rule).
  const auto only = parse_partitions("p=2 : ALL_CAS=both ;");
  EXPECT_EQ(pkey_table(only, EndPort{1, false, true}, 4), (Table{0xffff, 0x8002, 0x0002, 0}));
  EXPECT_EQ(pkey_table(only, EndPort{1, false, false}, 4), (Table{0x7fff, 0x8002, 0x0002, 0}));
  EXPECT_EQ(pkey_table(only, EndPort{1, true, false}, 4), (Table{0x7fff, 0, 0, 0}));
  // No more than PartitionCap entries.
  EXPECT_EQ(pkey_table(only, EndPort{1, false, true}, 2), (Table{0xffff, 0x8002}));
}

TEST(Partitions, GivenPartitionsExpectTheSweepToWriteEveryPortsTableOnce) {
  Config cfg = testing::two_by_two();
  Subnet subnet{cfg};
  int sets = 0;
  sm::FunctionTransport transport([&](const sm::MadBytes& m) -> std::optional<sm::MadBytes> {
    sets += m[3] == uint8_t(mad::Method::kSet) &&
            (m[16] << 8 | m[17]) == uint16_t(mad::AttrId::kPKeyTable);
    return subnet.process_smp(PortRef{0, 1}, m.data(), m.size());
  });
  sm::SubnetManager manager(transport);
  manager.set_partitions(parse_partitions(kStorage));
  ASSERT_TRUE(manager.sweep());
  EXPECT_EQ(subnet.port({0, 1}).pkeys[1], 0x8001);
  for (PortRef p : {PortRef{0, 2}, PortRef{1, 1}, PortRef{1, 2}})
    EXPECT_EQ(subnet.port(p).pkeys[1], 0x0001) << p.device << "/" << p.port;
  EXPECT_EQ(subnet.port({1, 2}).pkeys[0], 0xffff);
  EXPECT_EQ(sets, 5);  // four CA ports and the switch's port 0
  // The tables are right: another sweep leaves them alone.
  ASSERT_TRUE(manager.sweep());
  EXPECT_EQ(sets, 5);
}

}  // namespace
}  // namespace ibemu
