// Shared receive queues (IBA 10.2.9.5): given WQEs posted to one SRQ and QPs
// drawing from it, expect each WQE used once, in order, the armed limit to
// fire once when the count falls below it, and a QP entering the error state
// to flush only the WQE of its message in progress and report LAST_WQE.
#include <gtest/gtest.h>

#include <cerrno>
#include <vector>

#include "tests/unit/engine_test_fixture.h"

namespace ibemu::engine {
namespace {

RecvWqe wqe(uint64_t id, int num_sge = 1) {
  RecvWqe w;
  w.wr_id = id;
  w.num_sge = num_sge;
  for (int s = 0; s < num_sge; ++s) w.sge[s] = Sge{0x1000, 64, 1};
  return w;
}

TEST(EngineSrq, GivenArmedLimitExpectOneEventWhenTheCountFallsBelowIt) {
  int events = 0;
  SharedReceiveQueue srq(8, 2, [&] { ++events; });
  std::vector<RecvWqe> w;
  for (uint64_t i = 0; i < 6; ++i) w.push_back(wqe(i));
  int bad = -1;
  ASSERT_EQ(srq.post(w.data(), 6, &bad), 0);
  ASSERT_EQ(srq.arm_limit(4), 0);
  RecvWqe out;
  ASSERT_TRUE(srq.take(&out));
  ASSERT_TRUE(srq.take(&out));
  EXPECT_EQ(events, 0) << "4 left: not below the limit";
  ASSERT_TRUE(srq.take(&out));
  EXPECT_EQ(out.wr_id, 2u) << "oldest first";
  EXPECT_EQ(events, 1);
  EXPECT_EQ(srq.limit(), 0u) << "disarmed";
  ASSERT_TRUE(srq.take(&out));
  EXPECT_EQ(events, 1);
  EXPECT_EQ(srq.arm_limit(9), EINVAL) << "above max_wr";
}

TEST(EngineSrq, GivenBadPostsExpectErrnoAndIndex) {
  SharedReceiveQueue srq(2, 1, nullptr);
  RecvWqe w[3] = {wqe(1), wqe(2, 2), wqe(3)};
  int bad = -1;
  EXPECT_EQ(srq.post(w, 3, &bad), EINVAL);
  EXPECT_EQ(bad, 1) << "two SGEs on an SRQ of one";
  w[1] = wqe(2);
  EXPECT_EQ(srq.post(w + 1, 2, &bad), ENOMEM);
  EXPECT_EQ(bad, 1) << "the third WQE does not fit";
}

TEST(EngineSrq, GivenSrqOfZeroWrsExpectEveryPostRefused) {
  SharedReceiveQueue srq(0, 1, nullptr);  // what mlx5 grants for max_wr 0
  RecvWqe w = wqe(1);
  int bad = -1;
  EXPECT_EQ(srq.post(&w, 1, &bad), ENOMEM);
  EXPECT_EQ(bad, 0);
  EXPECT_TRUE(srq.empty());
}

TEST(EngineSrq, GivenQpOnSrqEnteringErrorExpectLastWqeAndSrqWqesKept) {
  testing::FakeLink link;
  testing::ConnectParams p;
  testing::Endpoint b(link, testing::kLidB, testing::kGuidB, testing::kQpnB, p);
  SharedReceiveQueue srq(8, 1, nullptr);
  QpInit init;
  init.qpn = 0x55;
  init.pd = testing::kPd;
  init.send_cq = &b.send_cq;
  init.recv_cq = &b.recv_cq;
  init.srq = &srq;
  init.max_send_wr = init.max_recv_wr = 4;
  init.max_send_sge = init.max_recv_sge = 1;
  std::vector<QpEvent> events;
  auto qp = b.engine.create_qp(init, [&](uint32_t, QpEvent e) { events.push_back(e); });
  ASSERT_EQ(testing::bring_to(*qp, QpState::kRts, testing::full_attr(testing::kLidA, 1)), 0);
  RecvWqe w = wqe(1);
  EXPECT_EQ(testing::post(*qp, w), EINVAL) << "no receive queue of its own";
  int bad;
  ASSERT_EQ(srq.post(&w, 1, &bad), 0);
  QpAttr err;
  err.qp_state = QpState::kErr;
  ASSERT_EQ(qp->modify(err, kQpState), 0);
  ASSERT_EQ(events, std::vector<QpEvent>{QpEvent::kLastWqeReached});
  b.poll();
  EXPECT_TRUE(b.recv_wcs.empty()) << "the SRQ's WQE is not flushed with the QP";
  EXPECT_FALSE(srq.empty());
}

}  // namespace
}  // namespace ibemu::engine
