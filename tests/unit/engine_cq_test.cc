// Completion queues: FIFO order, capacity and overrun (IBA 11.4.2.1), event
// arming for the next or the next solicited completion, one shot at a time
// (IBA 11.4.2.2), and for completions no event announced yet; resize, and
// purging a destroyed QP's completions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <vector>

#include "transport/engine/completion_queue.h"

namespace ibemu::engine {
namespace {

Completion wc(uint64_t id, uint32_t qpn = 1, WcStatus s = WcStatus::kSuccess) {
  Completion c;
  c.wr_id = id;
  c.qp_num = qpn;
  c.status = s;
  return c;
}

std::vector<uint64_t> poll_ids(CompletionQueue& cq, int max = 1000) {
  std::vector<Completion> out(max);
  out.resize(cq.poll(max, out.data()));
  std::vector<uint64_t> ids;
  for (const Completion& c : out) ids.push_back(c.wr_id);
  return ids;
}

TEST(EngineCq, GivenCompletionsExpectPolledInOrderOfArrival) {
  CompletionQueue cq(8, nullptr);
  for (uint64_t i = 1; i <= 5; ++i) ASSERT_TRUE(cq.push(wc(i), false));
  Completion out[2];
  ASSERT_EQ(cq.poll(2, out), 2);
  EXPECT_EQ(out[0].wr_id, 1u);
  EXPECT_EQ(out[1].wr_id, 2u);
  EXPECT_EQ(poll_ids(cq), (std::vector<uint64_t>{3, 4, 5}));
  EXPECT_EQ(cq.poll(4, out), 0);
}

TEST(EngineCq, GivenRingWrapsManyTimesExpectOrderKept) {
  CompletionQueue cq(3, nullptr);
  uint64_t next_in = 0, next_out = 0;
  for (int round = 0; round < 100; ++round) {
    const uint64_t room = 3 - (next_in - next_out);
    for (uint64_t i = 0; i < std::min<uint64_t>(room, 1 + round % 3); ++i)
      ASSERT_TRUE(cq.push(wc(next_in++), false));
    for (uint64_t id : poll_ids(cq, 1 + round % 2)) EXPECT_EQ(id, next_out++);
  }
  for (uint64_t id : poll_ids(cq)) EXPECT_EQ(id, next_out++);
  EXPECT_EQ(next_in, next_out);
  EXPECT_FALSE(cq.overrun());
}

TEST(EngineCq, GivenFullCqExpectOverrunReportedAndEarlierCompletionsKept) {
  CompletionQueue cq(4, nullptr);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(cq.push(wc(i), false));
  EXPECT_FALSE(cq.overrun());
  EXPECT_FALSE(cq.push(wc(99), false));
  EXPECT_TRUE(cq.overrun());
  EXPECT_EQ(poll_ids(cq), (std::vector<uint64_t>{0, 1, 2, 3}));
  EXPECT_TRUE(cq.overrun());  // the error is not cleared by polling
}

struct NotifyCounter {
  int fired = 0;
  std::function<void()> fn() {
    return [this] { ++fired; };
  }
};

TEST(EngineCq, GivenUnarmedCqExpectNoEvent) {
  NotifyCounter n;
  CompletionQueue cq(8, n.fn());
  cq.push(wc(1), true);
  cq.push(wc(2, 1, WcStatus::kRetryExcErr), false);
  EXPECT_EQ(n.fired, 0);
}

TEST(EngineCq, GivenArmedForNextExpectOneEventForAnyCompletion) {
  NotifyCounter n;
  CompletionQueue cq(8, n.fn());
  cq.arm(false);
  cq.push(wc(1), false);
  EXPECT_EQ(n.fired, 1);
  cq.push(wc(2), true);  // one shot: the CQ is no longer armed
  EXPECT_EQ(n.fired, 1);
  cq.arm(false);
  cq.push(wc(3), false);
  EXPECT_EQ(n.fired, 2);
}

TEST(EngineCq, GivenRearmingOverCompletionsAnEventAnnouncedExpectNoNewEvent) {
  // perftest's event mode: event, re-arm, then one poll for the completion
  // that raised it; a second event would make its next poll come back empty.
  NotifyCounter n;
  CompletionQueue cq(8, n.fn());
  cq.arm(false);
  cq.push(wc(1), false);
  EXPECT_EQ(n.fired, 1);
  cq.arm(false);
  EXPECT_EQ(n.fired, 1);
  EXPECT_EQ(poll_ids(cq), std::vector<uint64_t>{1});
  cq.push(wc(2), false);
  EXPECT_EQ(n.fired, 2);
}

TEST(EngineCq, GivenACompletionThatArrivedWhileNotArmedExpectArmingRaisesTheEvent) {
  // Open MPI's openib connection manager polls once per event and re-arms: a
  // completion that came in between must wake it.
  NotifyCounter n;
  CompletionQueue cq(8, n.fn());
  cq.arm(false);
  cq.push(wc(1), false);
  cq.push(wc(2), false);  // the CQ is not armed any more
  EXPECT_EQ(poll_ids(cq, 1), std::vector<uint64_t>{1});
  cq.arm(false);
  EXPECT_EQ(n.fired, 2);
  EXPECT_EQ(poll_ids(cq), std::vector<uint64_t>{2});
  cq.arm(false);  // nothing left unannounced: armed again
  EXPECT_EQ(n.fired, 2);
  cq.push(wc(3), false);
  EXPECT_EQ(n.fired, 3);
}

TEST(EngineCq, GivenCompletionsQueuedBeforeTheFirstArmingExpectTheArmingAnnouncesThem) {
  NotifyCounter n;
  CompletionQueue cq(8, n.fn());
  cq.push(wc(1), false);
  cq.arm(false);
  EXPECT_EQ(n.fired, 1);
  cq.push(wc(2), false);  // one shot
  EXPECT_EQ(n.fired, 1);
}

TEST(EngineCq, GivenTheUnannouncedCompletionPolledOrPurgedBeforeArmingExpectNoEvent) {
  NotifyCounter n;
  CompletionQueue cq(8, n.fn());
  cq.push(wc(1), false);
  EXPECT_EQ(poll_ids(cq).size(), 1u);
  cq.push(wc(2, 7), false);
  cq.purge_qp(7);
  cq.arm(false);
  EXPECT_EQ(n.fired, 0);
  cq.push(wc(3), false);
  EXPECT_EQ(n.fired, 1);
}

TEST(EngineCq, GivenSolicitedArmingOverUnannouncedCompletionsExpectOnlySolicitedOrErrorsFire) {
  NotifyCounter n;
  CompletionQueue cq(8, n.fn());
  cq.push(wc(1), false);
  cq.arm(true);
  EXPECT_EQ(n.fired, 0);  // unsolicited success: the arming holds
  cq.push(wc(2), false);
  EXPECT_EQ(n.fired, 0);
  cq.push(wc(3, 1, WcStatus::kRemAccessErr), false);
  EXPECT_EQ(n.fired, 1);
  cq.push(wc(4), true);  // arrives while not armed
  cq.arm(true);
  EXPECT_EQ(n.fired, 2);
}

TEST(EngineCq, GivenArmedForSolicitedExpectUnsolicitedSuccessIgnored) {
  NotifyCounter n;
  CompletionQueue cq(8, n.fn());
  cq.arm(true);
  cq.push(wc(1), false);
  cq.push(wc(2), false);
  EXPECT_EQ(n.fired, 0);
  cq.push(wc(3), true);
  EXPECT_EQ(n.fired, 1);
  cq.push(wc(4), true);  // one shot
  EXPECT_EQ(n.fired, 1);
  EXPECT_EQ(poll_ids(cq).size(), 4u);
}

TEST(EngineCq, GivenArmedForSolicitedExpectErrorCompletionFiresIt) {
  // A consumer waiting for solicited events must still hear of a failure.
  for (WcStatus s : {WcStatus::kWrFlushErr, WcStatus::kRemAccessErr, WcStatus::kLocLenErr}) {
    NotifyCounter n;
    CompletionQueue cq(8, n.fn());
    cq.arm(true);
    cq.push(wc(1, 1, s), false);
    EXPECT_EQ(n.fired, 1) << to_string(s);
  }
}

TEST(EngineCq, GivenArmedForNextThenForSolicitedExpectNextStillHolds) {
  NotifyCounter n;
  CompletionQueue cq(8, n.fn());
  cq.arm(false);
  cq.arm(true);
  cq.push(wc(1), false);
  EXPECT_EQ(n.fired, 1);
}

TEST(EngineCq, GivenArmedForSolicitedThenForNextExpectAnyCompletionFires) {
  NotifyCounter n;
  CompletionQueue cq(8, n.fn());
  cq.arm(true);
  cq.arm(false);
  cq.push(wc(1), false);
  EXPECT_EQ(n.fired, 1);
}

TEST(EngineCq, GivenOverrunExpectNoEventForTheLostCompletion) {
  NotifyCounter n;
  CompletionQueue cq(1, n.fn());
  cq.arm(false);
  cq.push(wc(1), false);
  cq.arm(false);  // over a completion its event announced: armed
  EXPECT_EQ(n.fired, 1);
  EXPECT_FALSE(cq.push(wc(2), false));
  EXPECT_EQ(n.fired, 1);
}

TEST(EngineCq, GivenResizeExpectCompletionsKeptInOrderAndNewCapacityUsed) {
  CompletionQueue cq(4, nullptr);
  for (uint64_t i = 0; i < 4; ++i) cq.push(wc(i), false);
  Completion out[2];
  ASSERT_EQ(cq.poll(2, out), 2);  // head is now mid-ring
  cq.push(wc(4), false);
  cq.push(wc(5), false);  // wrapped
  ASSERT_EQ(cq.resize(10), 0);
  EXPECT_EQ(cq.capacity(), 10u);
  for (uint64_t i = 6; i < 12; ++i) EXPECT_TRUE(cq.push(wc(i), false)) << i;
  EXPECT_FALSE(cq.push(wc(12), false));
  EXPECT_EQ(poll_ids(cq), (std::vector<uint64_t>{2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
}

TEST(EngineCq, GivenResizeBelowOutstandingCountExpectEinvalAndNothingLost) {
  CompletionQueue cq(8, nullptr);
  for (uint64_t i = 0; i < 5; ++i) cq.push(wc(i), false);
  EXPECT_EQ(cq.resize(4), EINVAL);
  EXPECT_EQ(cq.capacity(), 8u);
  ASSERT_EQ(cq.resize(5), 0);  // exactly the outstanding count is fine
  EXPECT_FALSE(cq.push(wc(5), false));
  EXPECT_EQ(poll_ids(cq), (std::vector<uint64_t>{0, 1, 2, 3, 4}));
}

TEST(EngineCq, GivenShrinkAfterWrapExpectOrderKept) {
  CompletionQueue cq(6, nullptr);
  for (uint64_t i = 0; i < 6; ++i) cq.push(wc(i), false);
  EXPECT_EQ(poll_ids(cq, 4).size(), 4u);
  cq.push(wc(6), false);
  cq.push(wc(7), false);
  ASSERT_EQ(cq.resize(5), 0);
  EXPECT_TRUE(cq.push(wc(8), false));
  EXPECT_FALSE(cq.push(wc(9), false));
  EXPECT_EQ(poll_ids(cq), (std::vector<uint64_t>{4, 5, 6, 7, 8}));
}

TEST(EngineCq, GivenPurgeQpExpectOnlyThatQpsCompletionsRemovedOrderKept) {
  CompletionQueue cq(8, nullptr);
  Completion out[1];
  cq.push(wc(100, 7), false);
  cq.poll(1, out);  // move the head so purge must handle a wrapped ring
  for (uint64_t i = 0; i < 8; ++i) cq.push(wc(i, i % 2 ? 7 : 9), false);
  cq.purge_qp(7);
  EXPECT_EQ(poll_ids(cq), (std::vector<uint64_t>{0, 2, 4, 6}));
  // The freed room is usable again.
  for (uint64_t i = 0; i < 8; ++i) EXPECT_TRUE(cq.push(wc(i, 9), false));
  cq.purge_qp(42);  // no such QP: nothing changes
  EXPECT_EQ(poll_ids(cq).size(), 8u);
}

TEST(EngineCq, GivenOverrunExpectOneErrorEventAndNoMoreCompletions) {
  int errors = 0;
  CompletionQueue cq(2, nullptr, [&errors] { ++errors; });
  ASSERT_TRUE(cq.push(wc(0), false));
  ASSERT_TRUE(cq.push(wc(1), false));
  EXPECT_FALSE(cq.push(wc(2), false));
  EXPECT_EQ(errors, 1);
  EXPECT_EQ(poll_ids(cq), (std::vector<uint64_t>{0, 1}));
  // IBA 11.4.2.1: an overrun CQ stays in error even with room again.
  EXPECT_FALSE(cq.push(wc(3), false));
  EXPECT_EQ(errors, 1);
}

}  // namespace
}  // namespace ibemu::engine
