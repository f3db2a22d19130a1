#pragma once
// ibemud's control socket: accepts clients on a SOCK_SEQPACKET Unix socket and
// runs one Session per client on the daemon's single io_context thread. The
// server owns its sessions; stop() closes the listener and every session so
// io_context::run() returns by itself.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include "emulator-daemon/asio.h"

#include "common/control_channel.h"

namespace ibemu {

using SessionId = uint64_t;

struct SessionInfo {
  SessionId id = 0;
  int pid = 0;
  unsigned uid = 0;
  std::string role = "unknown";
};

/// What the daemon does with requests; the server only moves messages.
class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  /// Handles one request; may consume fds_in (closing or keeping them) and add
  /// fds to send back (the server closes those after sending). A null reply
  /// is sent later with ControlServer::reply_later.
  virtual Json on_request(SessionInfo& session, const Json& request, std::vector<int>& fds_in,
                          std::vector<int>& fds_out) = 0;
  virtual void on_session_closed(const SessionInfo& session) = 0;
};

class ControlServer {
 public:
  /// Binds the socket (mode 0600) or throws std::runtime_error. A user
  /// other than root has at most `sessions_per_user` connections at once.
  ControlServer(boost::asio::io_context& io, std::string socket_path, RequestHandler& handler,
                uint32_t sessions_per_user);
  ~ControlServer();

  void start();
  /// Stops accepting and closes every session; run() then returns.
  void stop();
  std::vector<SessionInfo> sessions() const;
  /// Sends the reply to a request the handler answered with null (a reply
  /// that had to wait, such as an SMP that went to another host). False
  /// when the session is gone.
  bool reply_later(SessionId id, const Json& reply);

 private:
  class Session;
  void do_accept();
  void on_acceptable();
  /// Why a new connection of `uid` may not have a session; empty if it may.
  std::string refusal(unsigned uid) const;
  /// Answers the connection's first request with EMFILE and `why`, and
  /// closes it.
  static void refuse(int fd, const std::string& why);
  /// Accepts with the descriptor held in reserve when there is no other
  /// left, only to refuse the connection: a client is told, not left
  /// waiting in the listen queue, and the listener stops being readable.
  /// False when even that failed.
  bool refuse_without_descriptors();
  void on_session_closed(SessionId id);

  boost::asio::io_context& io_;
  std::string socket_path_;
  RequestHandler& handler_;
  boost::asio::posix::stream_descriptor listener_;
  boost::asio::steady_timer accept_backoff_;
  int spare_fd_ = -1;
  uint32_t sessions_per_user_;
  size_t max_sessions_;  // what the daemon's descriptor limit allows
  std::map<SessionId, std::shared_ptr<Session>> sessions_;
  SessionId next_id_ = 1;
  bool stopped_ = false;
};

}  // namespace ibemu
