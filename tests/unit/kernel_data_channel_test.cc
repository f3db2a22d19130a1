// The daemon's reader of ibemu.ko's data channel
// (emulator-daemon/kernel_data_channel.h), fed through a pipe: whole
// batches of the module's records reach the handler one by one and in
// order; a batch the checks refuse reaches it not at all.
#include "emulator-daemon/kernel_data_channel.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/unit/kernel_ctl_samples.h"

namespace ibemu {
namespace {

class KernelDataChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int p[2];
    ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
    write_fd_ = p[1];
    channel_.start(p[0], [this](const ibemu_data_hdr& hdr, const uint8_t*) {
      std::lock_guard lock(mu_);
      types_.push_back(hdr.type);
    });
  }
  void TearDown() override {
    channel_.stop();
    close(write_fd_);
  }

  void send(const std::vector<uint8_t>& batch) {
    // A pipe write of at most PIPE_BUF bytes arrives whole, as a module batch does.
    ASSERT_LE(batch.size(), size_t(PIPE_BUF));
    ASSERT_EQ(write(write_fd_, batch.data(), batch.size()), ssize_t(batch.size()));
  }
  // Waits until the reader took `batches` batches and refused `malformed`.
  bool settled(uint64_t batches, uint64_t malformed) {
    for (int i = 0; i < 2000; ++i) {
      if (channel_.counters().batches == batches && channel_.counters().malformed == malformed)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }
  std::vector<uint16_t> types() {
    std::lock_guard lock(mu_);
    return types_;
  }

  KernelDataChannel channel_;
  int write_fd_ = -1;
  std::mutex mu_;
  std::vector<uint16_t> types_;
};

TEST_F(KernelDataChannelTest, EveryRecordOfABatchReachesTheHandlerInOrder) {
  std::vector<uint8_t> batch;
  std::vector<uint16_t> want;
  for (const auto& s : testing::data_samples()) {
    if (s.direction != IBEMU_DATA_TO_DAEMON || batch.size() + s.bytes.size() > PIPE_BUF) continue;
    batch.insert(batch.end(), s.bytes.begin(), s.bytes.end());
    ibemu_data_hdr hdr;
    std::memcpy(&hdr, s.bytes.data(), sizeof hdr);
    want.push_back(hdr.type);
  }
  ASSERT_GT(want.size(), 3u);
  send(batch);
  ASSERT_TRUE(settled(1, 0));
  EXPECT_EQ(types(), want);
  EXPECT_EQ(channel_.counters().records, want.size());
}

TEST_F(KernelDataChannelTest, GivenAMalformedRecordExpectNoneOfItsBatchHandedOn) {
  auto good = testing::record_bytes(testing::valid_create_cq());
  auto bad = testing::record_bytes(testing::valid_destroy_cq());
  bad[sizeof(ibemu_data_hdr) - 1] = 1;  // a reserved byte set
  std::vector<uint8_t> batch = good;
  batch.insert(batch.end(), bad.begin(), bad.end());
  send(batch);
  ASSERT_TRUE(settled(0, 1));
  EXPECT_TRUE(types().empty());
  // The channel goes on: the next good batch is read.
  send(good);
  ASSERT_TRUE(settled(1, 1));
  EXPECT_EQ(types(), std::vector<uint16_t>{IBEMU_DATA_CREATE_CQ});
}

TEST_F(KernelDataChannelTest, RecordsForTheModuleAreRefusedHere) {
  send(testing::record_bytes(testing::valid_cqe()));
  ASSERT_TRUE(settled(0, 1));
  EXPECT_TRUE(types().empty());
}

TEST(KernelDataChannel, OpenOnAControlFileWithoutTheChannelSaysSo) {
  KernelDataChannel channel;
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  EXPECT_EQ(channel.open(p[0], [](const ibemu_data_hdr&, const uint8_t*) {}), ENOTTY);
  EXPECT_FALSE(channel.active());
  close(p[0]);
  close(p[1]);
}

}  // namespace
}  // namespace ibemu
