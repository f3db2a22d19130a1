// ibemud's config file: every mistake is a std::runtime_error that names it.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/config.h"

namespace ibemu {
namespace {

std::string error_of(const std::string& text) {
  try {
    Config::parse(text);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, GivenGuidsInEveryAcceptedSpellingExpectTheSameValue) {
  for (const char* guid : {"\"0x0002c90300000201\"", "\"0002:c903:0000:0201\"",
                           "\"0002c90300000201\"", "783964675506689"}) {
    const Config c = Config::parse(std::string(R"({"devices": [{"name": "ibemu0", "node_guid": )") +
                                   guid + "}]}");
    EXPECT_EQ(c.devices.at(0).node_guid, 0x0002c90300000201ull) << guid;
  }
}

TEST(Config, GivenAGuidThatIsNotHexOrTooLongExpectAClearError) {
  for (const char* guid :
       {"Wxfe80000000000000", "", "0x", "-1", "0x10000000000000000", "fe80 00"}) {
    const std::string err = error_of(std::string(R"({"subnet_prefix": ")") + guid + "\"}");
    EXPECT_NE(err.find("bad GUID"), std::string::npos) << guid << ": " << err;
  }
}

TEST(Config, GivenAFaultOnAPortThatCannotExistExpectAClearError) {
  for (const char* where : {"ibemu0:x", "ibemu0:", "ibemu0:0", "ibemu0:9", "ibemu0:99999999999"}) {
    const std::string err =
        error_of(std::string(R"({"faults": [{"interface": ")") + where + R"(", "drop": 1}]})");
    EXPECT_NE(err.find("DEVICE[:PORT]"), std::string::npos) << where << ": " << err;
  }
  EXPECT_EQ(
      Config::parse(R"({"faults": [{"interface": "ibemu1:2", "drop": 1}]})").faults.at(0).port, 2);
}

TEST(Config, GivenANumberOutsideItsFieldExpectAClearError) {
  for (const char* cfg : {R"({"devices": [{"name": "ibemu1", "ports": 1e78}]})",
                          R"({"devices": [{"name": "ibemu1", "ports": 2.5}]})",
                          R"({"devices": [{"name": "ibemu1", "vendor_id": -1}]})",
                          R"({"host_id": 99999999999999})", R"({"default_pkey": 65536})"}) {
    EXPECT_NE(error_of(cfg).find("must be an integer from"), std::string::npos)
        << cfg << ": " << error_of(cfg);
  }
}

TEST(Config, GivenASecretFileExpectItsBytesAndClearErrorsForWhatCannotBeOne) {
  char dir[] = "/tmp/ibemu-config-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string good = std::string(dir) + "/good", shorter = std::string(dir) + "/short";
  std::ofstream(good) << "sixteen or more bytes\n";
  std::ofstream(shorter) << "too short\n";
  auto with = [](const std::string& path) {
    return R"({"fabric": {"peers": ["10.0.0.2"], "secret_file": ")" + path + "\"}}";
  };
  EXPECT_EQ(Config::parse(with(good)).fabric.secret, "sixteen or more bytes");
  EXPECT_NE(error_of(with(shorter)).find("fewer than 16 bytes"), std::string::npos);
  for (const std::string& bad :
       {std::string(dir) + "/missing", std::string(dir), std::string("/dev/zero")})
    EXPECT_NE(error_of(with(bad)).find("regular file"), std::string::npos) << bad;
  std::filesystem::remove_all(dir);
}

TEST(Config, GivenLimitsExpectThemReadAndRefusedWhenMeaningless) {
  const Config c = Config::parse(
      R"({"limits": {"qps_per_context": 8, "registered_bytes_per_context": 1048576}})");
  EXPECT_EQ(c.qps_per_context, 8u);
  EXPECT_EQ(c.registered_bytes_per_context, 1048576u);
  EXPECT_EQ(Config::parse("{}").qps_per_context, 65536u);
  EXPECT_EQ(Config::parse("{}").registered_bytes_per_context, 0u);
  EXPECT_NE(error_of(R"({"limits": {"qps_per_context": 0}})").find(">= 1"), std::string::npos);
  EXPECT_NE(error_of(R"({"limits": {"mrs": 3}})").find("unknown limits key"), std::string::npos);
}

TEST(Config, GivenClientLimitsExpectDefaultsTheirValuesAndNoZero) {
  const Config d = Config::parse("{}");
  EXPECT_EQ(d.sessions_per_user, 1024u);
  EXPECT_EQ(d.contexts_per_session, 1024u);
  EXPECT_EQ(d.cm_binds_per_session, 4096u);
  const Config c = Config::parse(
      R"({"limits": {"sessions_per_user": 4, "contexts_per_session": 5,
                     "cm_binds_per_session": 6}})");
  EXPECT_EQ(c.sessions_per_user, 4u);
  EXPECT_EQ(c.contexts_per_session, 5u);
  EXPECT_EQ(c.cm_binds_per_session, 6u);
  for (const char* key : {"sessions_per_user", "contexts_per_session", "cm_binds_per_session"})
    EXPECT_NE(error_of(std::string(R"({"limits": {")") + key + R"(": 0}})").find(">= 1"),
              std::string::npos)
        << key;
}

TEST(Config, GivenTwoDevicesWithOneGuidExpectTheSecondRefused) {
  EXPECT_NE(error_of(R"({"devices": [{"node_guid": "0x0002c90300001000"},
                                     {"node_guid": "0x0002c90300001000"}]})")
                .find("ibemu1 has GUID 0x0002c90300001000, which ibemu0 already has"),
            std::string::npos);
  // Port GUIDs are the node GUID plus the port number: node GUIDs one apart
  // would give two ports one GUID.
  EXPECT_NE(error_of(R"({"devices": [{"node_guid": "0x0002c90300001000"},
                                     {"node_guid": "0x0002c90300001001"}]})")
                .find("which ibemu0 port 1 already has"),
            std::string::npos);
  EXPECT_NO_THROW(Config::parse(R"({"devices": [{"node_guid": "0x0002c90300001000"},
                                               {"node_guid": "0x0002c90300001010"}]})"));
}

TEST(Config, GivenMoreDevicesThanAHostHoldsExpectARefusalBeforeTheyAreRead) {
  std::string many = R"({"devices": [)";
  for (int i = 0; i < 100000; ++i) many += i ? ",{}" : "{}";
  many += "]}";
  EXPECT_NE(error_of(many).find("at most 16 devices"), std::string::npos);
}

TEST(Config, GivenAFileLargerThanAnyConfigExpectItRefusedUnparsed) {
  const std::string path = ::testing::TempDir() + "/huge-config.json";
  {
    std::ofstream out(path);
    out << R"({"devices": [)";
    for (size_t written = 0; written <= kMaxConfigBytes; written += 3) out << "{},";
    out << "{}]}";
  }
  try {
    Config::load(path);
    ADD_FAILURE() << "a file over kMaxConfigBytes was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("is larger than 1024 KiB"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(Config, GivenAPkeyTableExpectItAsGivenAndClearErrorsForWhatIsNoPartition) {
  EXPECT_EQ(Config::parse("{}").pkey_table(), std::vector<uint16_t>{0xffff});
  EXPECT_EQ(Config::parse(R"({"default_pkey": 32770})").pkey_table(),
            std::vector<uint16_t>{0x8002});
  EXPECT_EQ(Config::parse(R"({"pkeys": [65535, 32769, 1]})").pkey_table(),
            (std::vector<uint16_t>{0xffff, 0x8001, 0x0001}));
  for (const char* bad : {R"({"pkeys": [65535, 32768]})", R"({"pkeys": [0]})",
                          R"({"pkeys": [65536]})", R"({"pkeys": [-1]})", R"({"pkeys": 5})",
                          R"({"pkeys": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]})"})
    EXPECT_NE(error_of(bad).find("pkeys"), std::string::npos) << bad << ": " << error_of(bad);
}

TEST(Config, GivenTheUsersModeExpectIsolatedByDefaultAndOnlyTheTwoWords) {
  EXPECT_EQ(Config::parse("{}").users, "isolated");
  EXPECT_EQ(Config::parse(R"({"users": "shared"})").users, "shared");
  EXPECT_NE(error_of(R"({"users": "everyone"})").find("users must be"), std::string::npos);
}

}  // namespace
}  // namespace ibemu
