// common/pcap_writer: the pcap file header, ERF and bare InfiniBand records
// with nanosecond timestamps, and the ring of files.
#include "common/pcap_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace ibemu {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

uint32_t le32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

class PcapWriterTest : public ::testing::Test {
 protected:
  fs::path dir_ =
      fs::temp_directory_path() /
      ("pcap_writer_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
       "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  void SetUp() override { fs::create_directories(dir_); }
  void TearDown() override { fs::remove_all(dir_); }
  const std::vector<uint8_t> packet_ = std::vector<uint8_t>(30, 0xab);
  static constexpr uint64_t kTime = 1700000000ull * 1000000000ull + 123456789ull;
};

TEST_F(PcapWriterTest, ErfRecordsCarryTheInfinibandTypeAndBothTimestamps) {
  const fs::path file = dir_ / "erf.pcap";
  {
    PcapWriter w(file.string());
    ASSERT_EQ(w.open(), 0);
    ASSERT_EQ(w.write(kTime, packet_.data(), packet_.size()), 0);
  }
  const auto b = read_all(file);
  ASSERT_EQ(b.size(), 24u + 16u + 16u + packet_.size());
  EXPECT_EQ(le32(&b[0]), 0xa1b23c4du);  // nanosecond pcap
  EXPECT_EQ(le32(&b[20]), kLinktypeErf);
  EXPECT_EQ(le32(&b[24]), 1700000000u);  // ts_sec
  EXPECT_EQ(le32(&b[28]), 123456789u);   // ts_nsec
  EXPECT_EQ(le32(&b[32]), 16u + packet_.size());
  const uint8_t* erf = &b[40];
  uint64_t ts;
  std::memcpy(&ts, erf, 8);
  EXPECT_EQ(ts >> 32, 1700000000u);
  EXPECT_NEAR(double(ts & 0xffffffffu) / 4294967296.0, 0.123456789, 1e-9);
  EXPECT_EQ(erf[8], 21);                         // ERF_TYPE_INFINIBAND
  EXPECT_EQ((erf[10] << 8) | erf[11], 16 + 30);  // rlen
  EXPECT_EQ((erf[14] << 8) | erf[15], 30);       // wlen
  EXPECT_EQ(std::vector<uint8_t>(b.end() - 30, b.end()), packet_);
}

TEST_F(PcapWriterTest, BareInfinibandRecordsAreThePacketAlone) {
  const fs::path file = dir_ / "ib.pcap";
  {
    PcapWriter w(file.string(), kLinktypeInfiniband);
    ASSERT_EQ(w.open(), 0);
    ASSERT_EQ(w.write(kTime, packet_.data(), packet_.size()), 0);
  }
  const auto b = read_all(file);
  ASSERT_EQ(b.size(), 24u + 16u + packet_.size());
  EXPECT_EQ(le32(&b[20]), 247u);
  EXPECT_EQ(le32(&b[32]), packet_.size());
}

TEST_F(PcapWriterTest, RingOfFilesOverwritesTheOldest) {
  const fs::path file = dir_ / "ring.pcap";
  PcapWriter w(file.string(), kLinktypeInfiniband, /*max_bytes=*/100, /*files=*/3);
  ASSERT_EQ(w.open(), 0);
  // 24 + 2 x 46 > 100: each file takes two records.
  for (int i = 0; i < 8; ++i) ASSERT_EQ(w.write(kTime + i, packet_.data(), packet_.size()), 0);
  w.flush();
  EXPECT_TRUE(fs::exists(file));
  EXPECT_TRUE(fs::exists(dir_ / "ring.pcap.1"));
  EXPECT_TRUE(fs::exists(dir_ / "ring.pcap.2"));
  EXPECT_FALSE(fs::exists(dir_ / "ring.pcap.3"));
  // Records 1-2, 3-4 and 5-6 filled the three files; 7-8 went round into
  // the first again, and the second was started afresh after them.
  EXPECT_EQ(read_all(file).size(), 24u + 2 * 46u);
  EXPECT_EQ(read_all(dir_ / "ring.pcap.1").size(), 24u);
  EXPECT_EQ(read_all(dir_ / "ring.pcap.2").size(), 24u + 2 * 46u);
  EXPECT_EQ(w.current_path(), (dir_ / "ring.pcap.1").string());
}

TEST_F(PcapWriterTest, AFileThatCannotBeCreatedIsAnError) {
  PcapWriter w((dir_ / "no" / "such" / "dir.pcap").string());
  EXPECT_EQ(w.open(), ENOENT);
  EXPECT_EQ(w.write(kTime, packet_.data(), packet_.size()), EBADF);
}

}  // namespace
}  // namespace ibemu
