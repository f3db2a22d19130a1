// ibemud's readiness datagram to systemd (Type=notify), received on a
// socket of the test's own standing in for the service manager.
#include "emulator-daemon/service_readiness.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace {

class FakeServiceManager {
 public:
  // Abstract names need no directory and vanish with the socket.
  explicit FakeServiceManager(const std::string& abstract_name) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    abstract_name.copy(address.sun_path + 1, sizeof(address.sun_path) - 1);
    bound_ = bind(fd_, reinterpret_cast<sockaddr*>(&address),
                  socklen_t(offsetof(sockaddr_un, sun_path) + 1 + abstract_name.size())) == 0;
  }
  ~FakeServiceManager() { close(fd_); }
  bool bound() const { return bound_; }
  std::string receive() {
    char buffer[256];
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT);
    return n < 0 ? std::string{} : std::string(buffer, size_t(n));
  }

 private:
  int fd_ = -1;
  bool bound_ = false;
};

std::string unique_name() { return "ibemu-readiness-test-" + std::to_string(getpid()); }

TEST(ServiceReadiness, WithoutNotifySocketNothingIsSent) {
  unsetenv("NOTIFY_SOCKET");
  EXPECT_FALSE(ibemu::notify_service_manager_ready());
}

TEST(ServiceReadiness, SendsReadyToAnAbstractSocket) {
  FakeServiceManager manager(unique_name());
  ASSERT_TRUE(manager.bound());
  setenv("NOTIFY_SOCKET", ("@" + unique_name()).c_str(), 1);
  EXPECT_TRUE(ibemu::notify_service_manager_ready());
  EXPECT_EQ(manager.receive(), "READY=1");
  unsetenv("NOTIFY_SOCKET");
}

TEST(ServiceReadiness, NobodyListeningIsNotAnError) {
  setenv("NOTIFY_SOCKET", ("@" + unique_name() + "-absent").c_str(), 1);
  EXPECT_FALSE(ibemu::notify_service_manager_ready());
  unsetenv("NOTIFY_SOCKET");
}

TEST(ServiceReadiness, ARelativeOrEmptyNameIsRefused) {
  setenv("NOTIFY_SOCKET", "relative/path", 1);
  EXPECT_FALSE(ibemu::notify_service_manager_ready());
  setenv("NOTIFY_SOCKET", "", 1);
  EXPECT_FALSE(ibemu::notify_service_manager_ready());
  unsetenv("NOTIFY_SOCKET");
}

}  // namespace
