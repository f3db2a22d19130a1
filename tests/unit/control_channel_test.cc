// What a caller that must not throw reads from a control reply: the
// provider runs under C callers, where an exception aborts the program.
#include "common/control_channel.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace ibemu {
namespace {

TEST(ReplyErrno, OkReplyIsZero) {
  EXPECT_EQ(reply_errno(0, Json{{"ok", true}, {"errno", 5}}, EINVAL), 0);
}

TEST(ReplyErrno, RefusalGivesItsErrno) {
  EXPECT_EQ(reply_errno(0, Json{{"ok", false}, {"errno", ENOSPC}}, EINVAL), ENOSPC);
}

TEST(ReplyErrno, NoAnswerIsEio) {
  EXPECT_EQ(reply_errno(ECONNRESET, Json(), EINVAL), EIO);
  EXPECT_EQ(reply_errno(EPIPE, Json::object(), ENOMEM), EIO);
}

TEST(ReplyErrno, MalformedRepliesGiveTheFallback) {
  EXPECT_EQ(reply_errno(0, Json(), ENOMEM), ENOMEM);
  EXPECT_EQ(reply_errno(0, Json::array({1, 2}), ENOMEM), ENOMEM);
  EXPECT_EQ(reply_errno(0, Json{{"ok", "yes"}}, ENOMEM), ENOMEM);
  EXPECT_EQ(reply_errno(0, Json{{"ok", false}, {"errno", "EINVAL"}}, ENOMEM), ENOMEM);
  EXPECT_EQ(reply_errno(0, Json{{"ok", false}, {"errno", -3}}, ENOMEM), ENOMEM);
  EXPECT_EQ(reply_errno(0, Json{{"ok", false}, {"errno", 0}}, ENOMEM), ENOMEM);
  EXPECT_EQ(reply_errno(0, Json{{"ok", false}, {"errno", 1u << 20}}, ENOMEM), ENOMEM);
}

TEST(ReplyUint, ReadsOnlyAnUnsignedThatFits) {
  uint64_t v = 7;
  EXPECT_TRUE(reply_uint(Json{{"qpn", 0x123456}}, "qpn", 0xffffff, &v));
  EXPECT_EQ(v, 0x123456u);
  EXPECT_FALSE(reply_uint(Json{{"qpn", 0x1000000}}, "qpn", 0xffffff, &v));
  EXPECT_FALSE(reply_uint(Json{{"qpn", -1}}, "qpn", 0xffffff, &v));
  EXPECT_FALSE(reply_uint(Json{{"qpn", "12"}}, "qpn", 0xffffff, &v));
  EXPECT_FALSE(reply_uint(Json{{"qpn", 1.5}}, "qpn", 0xffffff, &v));
  EXPECT_FALSE(reply_uint(Json{}, "qpn", 0xffffff, &v));
  EXPECT_FALSE(reply_uint(Json::array(), "qpn", 0xffffff, &v));
  EXPECT_EQ(v, 0x123456u);
}

TEST(ReplyOk, OnlyABooleanTrueIsOk) {
  EXPECT_TRUE(reply_ok(Json{{"ok", true}}));
  EXPECT_FALSE(reply_ok(Json{{"ok", false}}));
  EXPECT_FALSE(reply_ok(Json{{"ok", 1}}));
  EXPECT_FALSE(reply_ok(Json{{"ok", "true"}}));
  EXPECT_FALSE(reply_ok(Json{}));
  EXPECT_FALSE(reply_ok(Json::array({true})));
}

TEST(ReplyUintOr, AFieldOfAnotherTypeGivesTheFallbackAndNeverThrows) {
  EXPECT_EQ(reply_uint_or(Json{{"owner", 42}}, "owner", 0), 42u);
  EXPECT_EQ(reply_uint_or(Json{{"owner", "42"}}, "owner", 7), 7u);
  EXPECT_EQ(reply_uint_or(Json{{"owner", -3}}, "owner", 7), 7u);
  EXPECT_EQ(reply_uint_or(Json{{"owner", nullptr}}, "owner", 7), 7u);
  EXPECT_EQ(reply_uint_or(Json::array(), "owner", 7), 7u);
}

// A listening socket in a temporary directory plays the daemon.
class ControlClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/ibemu-control-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/control.sock";
    listener_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    ASSERT_GE(listener_, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    ASSERT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(listen(listener_, 1), 0);
    ASSERT_EQ(client_.connect(path_), 0);
    daemon_ = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    ASSERT_GE(daemon_, 0);
  }
  void TearDown() override {
    client_.close();
    if (daemon_ >= 0) close(daemon_);
    if (listener_ >= 0) close(listener_);
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  // The daemon's side: takes the request, answers with `raw` bytes (or
  // hangs up when raw is null).
  int request_answered_with(const char* raw, Json* reply) {
    std::thread daemon([this, raw] {
      char buf[4096];
      if (recv(daemon_, buf, sizeof(buf), 0) <= 0) return;
      if (raw)
        send(daemon_, raw, std::strlen(raw), MSG_NOSIGNAL);
      else
        shutdown(daemon_, SHUT_RDWR);
    });
    const int rc = client_.request({{"op", "probe"}}, reply);
    daemon.join();
    return rc;
  }

  std::string dir_, path_;
  int listener_ = -1;
  int daemon_ = -1;
  ControlClient client_;
};

TEST_F(ControlClientTest, AnObjectReplyIsReturned) {
  Json reply;
  EXPECT_EQ(request_answered_with(R"({"ok":true,"qpn":17})", &reply), 0);
  EXPECT_EQ(reply.value("qpn", 0), 17);
}

TEST_F(ControlClientTest, AReplyThatIsNotAnObjectIsAProtocolError) {
  Json reply;
  EXPECT_EQ(request_answered_with("[1,2,3]", &reply), EPROTO);
  ASSERT_TRUE(reply.is_object());
  EXPECT_TRUE(reply.empty());
  EXPECT_EQ(reply_errno(EPROTO, reply, EINVAL), EIO);
}

TEST_F(ControlClientTest, ADaemonThatHangsUpLeavesAnEmptyObject) {
  Json reply = Json::array({"stale"});
  EXPECT_NE(request_answered_with(nullptr, &reply), 0);
  ASSERT_TRUE(reply.is_object());
  // What verbs_api does with it must not throw.
  EXPECT_EQ(reply.value("errno", ENOMEM), ENOMEM);
}

TEST_F(ControlClientTest, AReplyLargerThanASocketRecordArrivesWhole) {
  Json big = {{"ok", true}, {"items", Json::array()}};
  for (int i = 0; i < 100000; ++i) big["items"].push_back(i);
  ASSERT_GT(big.dump().size(), size_t{256 * 1024});  // more than a record may carry
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  std::thread daemon([&] {
    char buf[4096];
    if (recv(daemon_, buf, sizeof(buf), 0) <= 0) return;
    EXPECT_EQ(send_reply(daemon_, big, {pipe_fds[0]}), 0);
  });
  Json reply;
  std::vector<int> fds;
  EXPECT_EQ(client_.request({{"op", "status"}}, &reply, {}, &fds), 0);
  daemon.join();
  EXPECT_EQ(reply, big);
  // The reply's own descriptor comes through; the memfd does not linger.
  ASSERT_EQ(fds.size(), 1u);
  for (int fd : fds) close(fd);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

TEST_F(ControlClientTest, ASmallReplyTravelsInTheRecordItself) {
  std::thread daemon([&] {
    char buf[4096];
    if (recv(daemon_, buf, sizeof(buf), 0) <= 0) return;
    EXPECT_EQ(send_reply(daemon_, Json{{"ok", true}}), 0);
  });
  Json reply;
  EXPECT_EQ(client_.request({{"op", "ping"}}, &reply), 0);
  daemon.join();
  EXPECT_EQ(reply, (Json{{"ok", true}}));
}

TEST_F(ControlClientTest, AReplyInAMemfdThatIsNotSealedIsRefused) {
  std::thread daemon([&] {
    char buf[4096];
    if (recv(daemon_, buf, sizeof(buf), 0) <= 0) return;
    const int fd = memfd_create("loose", MFD_CLOEXEC);
    ASSERT_EQ(write(fd, "{}", 2), 2);
    EXPECT_EQ(send_message(daemon_, Json{{"reply_in_fd", 2}}, {fd}), 0);
    close(fd);
  });
  Json reply;
  EXPECT_NE(client_.request({{"op", "status"}}, &reply), 0);
  daemon.join();
  EXPECT_TRUE(reply.is_object() && reply.empty());
}

TEST(RecvMessage, AnEmptyRecordIsNotTheEnd) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
  ASSERT_EQ(send(pair[0], "", 0, 0), 0);
  Json msg;
  EXPECT_EQ(recv_message(pair[1], &msg, nullptr), ENODATA);
  close(pair[0]);
  EXPECT_EQ(recv_message(pair[1], &msg, nullptr), ECONNRESET);
  close(pair[1]);
}

}  // namespace
}  // namespace ibemu
