// The GoogleTest fixture (harness/gtest) used as a project using ibemu would:
// verbs in this very process against the fabric run_under_fabric() started
// (ibemu_gtest_main), and the fabric steered from the tests.
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ibemu/gtest_fabric.h"

extern "C" {
#include "tests/programs/rc_common.h"
}

namespace {

using ibemu::testing::fabric;
using namespace std::chrono_literals;

constexpr int kBytes = 64 * 1024;
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

// One side of an RC connection between ibemu0 port 1 and ibemu1 port 1.
struct Side {
  rc_end end{};
  std::vector<char> buf = std::vector<char>(kBytes);
  ibv_mr* mr = nullptr;

  ~Side() {
    if (mr) ibv_dereg_mr(mr);
    if (end.qp) ibv_destroy_qp(end.qp);
    if (end.cq) ibv_destroy_cq(end.cq);
    if (end.pd) ibv_dealloc_pd(end.pd);
    if (end.ctx) ibv_close_device(end.ctx);
  }
};

class FabricRcPair : public ::testing::Test {
 protected:
  // timeout: IBA's local ACK timeout exponent (4.096 us << timeout).
  void connect(uint8_t timeout, uint8_t rnr_retry) {
    ASSERT_EQ(open_rc_end("ibemu0", 16, &a_.end), 0);
    ASSERT_EQ(open_rc_end("ibemu1", 16, &b_.end), 0);
    for (Side* s : {&a_, &b_}) {
      s->mr = ibv_reg_mr(s->end.pd, s->buf.data(), kBytes, kAccess);
      ASSERT_NE(s->mr, nullptr);
    }
    ASSERT_EQ(connect_rc_qp(a_.end.qp, b_.end.qp->qp_num, b_.end.lid, IBV_MTU_4096, timeout,
                            rnr_retry, kAccess),
              0);
    ASSERT_EQ(connect_rc_qp(b_.end.qp, a_.end.qp->qp_num, a_.end.lid, IBV_MTU_4096, timeout,
                            rnr_retry, kAccess),
              0);
  }

  // One signaled WR of `length` bytes from a's buffer; an RDMA WRITE lands
  // at the start of b's.
  void post_from_a(ibv_wr_opcode opcode, uint32_t length) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(a_.buf.data()), length, a_.mr->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(b_.buf.data());
    wr.wr.rdma.rkey = b_.mr->rkey;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(a_.end.qp, &wr, &bad), 0);
  }

  void post_write(uint32_t length) { post_from_a(IBV_WR_RDMA_WRITE, length); }

  void post_send_and_receive(uint32_t length) {
    ibv_sge rsge{reinterpret_cast<uintptr_t>(b_.buf.data()), length, b_.mr->lkey};
    ibv_recv_wr rwr{};
    rwr.sg_list = &rsge;
    rwr.num_sge = 1;
    ibv_recv_wr* rbad = nullptr;
    ASSERT_EQ(ibv_post_recv(b_.end.qp, &rwr, &rbad), 0);
    post_from_a(IBV_WR_SEND, length);
  }

  // The sender's next completion; IBV_WC_GENERAL_ERR stands for "none came".
  static ibv_wc_status next_completion(ibv_cq* cq, std::chrono::seconds limit = 60s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    ibv_wc wc{};
    while (std::chrono::steady_clock::now() < deadline) {
      const int n = ibv_poll_cq(cq, 1, &wc);
      if (n < 0) return IBV_WC_GENERAL_ERR;
      if (n == 1) return wc.status;
      std::this_thread::sleep_for(100us);
    }
    return IBV_WC_GENERAL_ERR;
  }

  void fill(char seed) {
    for (int i = 0; i < kBytes; ++i) a_.buf[i] = char(seed + i * 7);
  }

  Side a_, b_;  // a_ on ibemu0 requests, b_ on ibemu1 responds
};

TEST(FabricFixture, VerbsSeesTheFabricsDevices) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr);
  std::set<std::string> names;
  for (int i = 0; i < n; ++i) names.insert(ibv_get_device_name(list[i]));
  ibv_free_device_list(list);
  const auto devices = fabric().devices();
  EXPECT_EQ(names, std::set<std::string>(devices.begin(), devices.end()));
  EXPECT_EQ(devices, (std::vector<std::string>{"ibemu0", "ibemu1"}));
  EXPECT_EQ(fabric().port_count("ibemu1"), 2);
}

TEST(FabricFixture, PortIsActiveWithTheLidTheSmGaveIt) {
  rc_end e{};
  ASSERT_EQ(open_rc_end("ibemu1", 1, &e), 0);
  ibv_port_attr attr{};
  ASSERT_EQ(ibv_query_port(e.ctx, 1, &attr), 0);
  const auto port = fabric().port("ibemu1", 1);
  EXPECT_EQ(attr.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(port.state, "ACTIVE");
  EXPECT_EQ(attr.lid, port.lid);
  EXPECT_NE(port.lid, 0);
  ibv_destroy_qp(e.qp);
  ibv_destroy_cq(e.cq);
  ibv_dealloc_pd(e.pd);
  ibv_close_device(e.ctx);
}

TEST_F(FabricRcPair, RdmaWriteLandsInTheRemoteBuffer) {
  ASSERT_NO_FATAL_FAILURE(connect(12, 7));
  fill(1);
  ASSERT_NO_FATAL_FAILURE(post_write(kBytes));
  ASSERT_EQ(next_completion(a_.end.cq), IBV_WC_SUCCESS);
  EXPECT_EQ(a_.buf, b_.buf);
}

TEST_F(FabricRcPair, RdmaWriteCompletesOverALossyLink) {
  ASSERT_NO_FATAL_FAILURE(connect(12, 7));  // 16 ms local ACK timeout
  const uint64_t dropped_before = fabric().port("ibemu0", 1).link_fault_drops;
  ibemu::testing::ScopedFaults lossy("ibemu0", 1, {.drop_pct = 20, .seed = 3});
  for (char round = 0; round < 8; ++round) {
    fill(round);
    ASSERT_NO_FATAL_FAILURE(post_write(kBytes));
    ASSERT_EQ(next_completion(a_.end.cq), IBV_WC_SUCCESS) << "write " << int(round);
    ASSERT_EQ(a_.buf, b_.buf) << "write " << int(round);
  }
  EXPECT_GT(fabric().port("ibemu0", 1).link_fault_drops, dropped_before);
}

// IBA's exact retry timing: the error after retry_cnt + 1 ACK timeouts, not
// after the provider's stall tolerance (docs/configuration.md).
class FabricRcPairStrictTiming : public FabricRcPair {
 protected:
  void SetUp() override { setenv("IBEMU_STALL_TOLERANCE_MS", "0", 1); }
  void TearDown() override { unsetenv("IBEMU_STALL_TOLERANCE_MS"); }
};

TEST_F(FabricRcPairStrictTiming, SendToAPulledCableEndsWithRetryExceeded) {
  ASSERT_NO_FATAL_FAILURE(connect(8, 7));  // 1 ms ACK timeout, 8 tries
  ibemu::testing::ScopedLinkDown cable("ibemu1", 1);
  EXPECT_EQ(fabric().port("ibemu1", 1).state, "DOWN");
  ASSERT_NO_FATAL_FAILURE(post_send_and_receive(64));
  EXPECT_EQ(next_completion(a_.end.cq), IBV_WC_RETRY_EXC_ERR);
}

TEST_F(FabricRcPair, ForcedRnrNakIsRetried) {
  ASSERT_NO_FATAL_FAILURE(connect(12, 7));
  fabric().force_nak("ibemu1", b_.end.qp->qp_num, ibemu::testing::NakKind::kRnr, 2);
  ASSERT_NO_FATAL_FAILURE(post_send_and_receive(64));
  EXPECT_EQ(next_completion(a_.end.cq), IBV_WC_SUCCESS);
}

TEST_F(FabricRcPair, ForcedRnrNakWithoutRnrRetriesFails) {
  ASSERT_NO_FATAL_FAILURE(connect(12, 0));
  fabric().force_nak("ibemu1", b_.end.qp->qp_num, ibemu::testing::NakKind::kRnr, 1);
  ASSERT_NO_FATAL_FAILURE(post_send_and_receive(64));
  EXPECT_EQ(next_completion(a_.end.cq), IBV_WC_RNR_RETRY_EXC_ERR);
}

TEST_F(FabricRcPair, CaptureRecordsTheWrites) {
  ASSERT_NO_FATAL_FAILURE(connect(12, 7));
  const std::string pcap = fabric().runtime_dir() + "/writes.pcap";
  fabric().start_capture(pcap);
  // The providers learn of the capture through the state page, a moment
  // after the daemon started it: write until packets show up.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (fabric().capture_packets() == 0 && std::chrono::steady_clock::now() < deadline) {
    ASSERT_NO_FATAL_FAILURE(post_write(4096));
    ASSERT_EQ(next_completion(a_.end.cq), IBV_WC_SUCCESS);
  }
  EXPECT_GT(fabric().stop_capture(), 0u);
  EXPECT_GT(std::filesystem::file_size(pcap), 24u);  // more than the pcap header
}

}  // namespace
