#include "emulator-daemon/service_readiness.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace ibemu {

bool notify_service_manager_ready() noexcept {
  const char* socket_name = std::getenv("NOTIFY_SOCKET");
  if (socket_name == nullptr) return false;
  std::string_view name{socket_name};
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  // A filesystem path, or "@name" for an abstract socket (sd_notify(3)).
  if (name.empty() || (name[0] != '/' && name[0] != '@') || name.size() >= sizeof(address.sun_path))
    return false;
  std::memcpy(address.sun_path, name.data(), name.size());
  if (name[0] == '@') address.sun_path[0] = '\0';
  const socklen_t length = socklen_t(offsetof(sockaddr_un, sun_path) + name.size());

  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  static constexpr std::string_view kReady = "READY=1";
  const ssize_t sent = sendto(fd, kReady.data(), kReady.size(), MSG_NOSIGNAL,
                              reinterpret_cast<const sockaddr*>(&address), length);
  close(fd);
  return sent == ssize_t(kReady.size());
}

}  // namespace ibemu
