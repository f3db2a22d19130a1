#pragma once
// The SM's MAD port: the umad file of the port it runs on (through ibemud's
// umad socket, common/umad_protocol.h), with one agent registered as the SA's
// server. Requests come in by recv(); responses go out by send().
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ibemu::sm {

/// A MAD as it arrived: where from, and its bytes.
struct ReceivedMad {
  uint16_t slid = 0;
  uint32_t sqpn = 0;
  std::vector<uint8_t> mad;
};

class UmadPort {
 public:
  UmadPort() = default;
  ~UmadPort();
  UmadPort(const UmadPort&) = delete;
  UmadPort& operator=(const UmadPort&) = delete;

  /// Opens `socket_path` (dev/infiniband/umadN in the daemon's sysfs tree) and
  /// registers the SA's server agent. 0 or an errno.
  int open_sa(const std::string& socket_path);
  /// The file's fd, to wait on with poll().
  int fd() const { return fd_; }
  /// The next MAD, if one is waiting.
  std::optional<ReceivedMad> recv();
  /// Sends a MAD to `dlid`/`dqpn` (a response: no timeout). 0 or an errno.
  int send(uint16_t dlid, uint32_t dqpn, const std::vector<uint8_t>& mad);

 private:
  int fd_ = -1;
  uint32_t agent_ = 0;
};

}  // namespace ibemu::sm
