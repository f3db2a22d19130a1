// The snapshot page between a provider and the daemon (common/snapshot_page.h)
// and the daemon's view of every context's page (emulator-daemon/context_snapshots.h).
// Given a request answered, not answered, or a page a program tampered with,
// expect the daemon to read the answer, wait, or refuse the page.
#include "common/snapshot_page.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/context_snapshot.h"
#include "emulator-daemon/context_snapshots.h"

namespace ibemu {
namespace {

// The daemon's side of a page the provider created.
SnapshotPage reader_of(const SnapshotPage& writer) {
  SnapshotPage reader;
  EXPECT_EQ(reader.attach_read_only(dup(writer.fd())), 0);
  return reader;
}

TEST(SnapshotPage, GivenRequestNotYetAnsweredExpectNothing) {
  SnapshotPage writer;
  ASSERT_EQ(writer.create(), 0);
  SnapshotPage reader = reader_of(writer);
  EXPECT_FALSE(reader.read(1));
  ASSERT_TRUE(writer.publish(1, R"({"a":1})"));
  EXPECT_EQ(reader.read(1), R"({"a":1})");
  EXPECT_FALSE(reader.read(2));  // a newer request is not answered by an old snapshot
  ASSERT_TRUE(writer.publish(3, "{}"));
  EXPECT_EQ(reader.read(2), "{}");  // a later answer serves an earlier request
}

TEST(SnapshotPage, GivenContentLargerThanThePageExpectRefusedAndOldAnswerKept) {
  SnapshotPage writer;
  ASSERT_EQ(writer.create(), 0);
  ASSERT_TRUE(writer.publish(1, "{}"));
  EXPECT_FALSE(writer.publish(2, std::string(SnapshotPage::kMaxContent + 1, ' ')));
  SnapshotPage reader = reader_of(writer);
  EXPECT_EQ(reader.read(1), "{}");
  EXPECT_FALSE(reader.read(2));
}

TEST(SnapshotPage, GivenUnsealedMemfdExpectRefused) {
  // An owner that could shrink the file would make the daemon's reads fault.
  int fd = memfd_create("unsealed", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, SnapshotPage::kBytes), 0);
  SnapshotPage reader;
  EXPECT_EQ(reader.attach_read_only(fd), EINVAL);
  EXPECT_FALSE(reader.attached());
}

TEST(SnapshotPage, GivenSealedMemfdOfAnotherSizeExpectRefused) {
  int fd = memfd_create("small", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  ASSERT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  SnapshotPage reader;
  EXPECT_EQ(reader.attach_read_only(fd), EINVAL);
}

TEST(SnapshotPage, GivenReadOnlyMappingExpectPublishRefused) {
  SnapshotPage writer;
  ASSERT_EQ(writer.create(), 0);
  SnapshotPage reader = reader_of(writer);
  EXPECT_FALSE(reader.publish(1, "{}"));
}

std::string sample_json(uint32_t qpn) {
  ContextSnapshot s;
  engine::QpSnapshot q;
  q.qpn = qpn;
  q.state = engine::QpState::kRts;
  s.qps.push_back(q);
  s.qps_total = 1;
  return to_json(s).dump();
}

TEST(ContextSnapshots, GivenOneContextSilentExpectNotAllAnsweredAndItMarked) {
  SnapshotPage w1, w2;
  ASSERT_EQ(w1.create(), 0);
  ASSERT_EQ(w2.create(), 0);
  ContextSnapshots all;
  all.add(10, /*session=*/1, /*device=*/0, reader_of(w1));
  all.add(11, /*session=*/2, /*device=*/1, reader_of(w2));
  auto everyone = [](uint64_t) { return true; };
  ASSERT_TRUE(w1.publish(5, sample_json(0x42)));
  EXPECT_FALSE(all.answered(5, everyone));
  EXPECT_TRUE(all.answered(5, [](uint64_t session) { return session == 1; }));

  size_t budget = 1 << 20;
  const Json one = all.session_json(1, 5, {"ibemu0", "ibemu1"}, &budget);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0]["context"], 10);
  EXPECT_EQ(one[0]["device"], "ibemu0");
  EXPECT_EQ(one[0]["answered"], true);
  EXPECT_EQ(one[0]["qps"][0]["qpn"], 0x42);
  EXPECT_EQ(one[0]["qps"][0]["state"], "RTS");
  const Json two = all.session_json(2, 5, {"ibemu0", "ibemu1"}, &budget);
  EXPECT_EQ(two[0]["answered"], false);
  EXPECT_FALSE(two[0].contains("qps"));

  all.remove_session(2);
  EXPECT_TRUE(all.answered(5, everyone));
}

TEST(ContextSnapshots, GivenGarbageOnThePageExpectNotPassedOn) {
  SnapshotPage w;
  ASSERT_EQ(w.create(), 0);
  ContextSnapshots all;
  all.add(1, 1, 0, reader_of(w));
  ASSERT_TRUE(w.publish(1, R"({"qps": [{"qpn": 1, "evil": "<script>"}]})"));
  size_t budget = 1 << 20;
  const Json j = all.session_json(1, 1, {"ibemu0"}, &budget);
  EXPECT_EQ(j[0]["answered"], false);
  EXPECT_FALSE(j[0].contains("qps"));
}

TEST(ContextSnapshots, GivenReplyBudgetSpentExpectTotalsOnly) {
  SnapshotPage w;
  ASSERT_EQ(w.create(), 0);
  ContextSnapshots all;
  all.add(1, 1, 0, reader_of(w));
  ASSERT_TRUE(w.publish(1, sample_json(7)));
  size_t budget = 10;
  const Json j = all.session_json(1, 1, {"ibemu0"}, &budget);
  EXPECT_EQ(j[0]["answered"], true);
  EXPECT_EQ(j[0]["omitted"], true);
  EXPECT_EQ(j[0]["qps_total"], 1);
  EXPECT_FALSE(j[0].contains("qps"));
}

}  // namespace
}  // namespace ibemu
