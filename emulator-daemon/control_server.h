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
  /// Binds the socket (mode 0600) or throws std::runtime_error.
  ControlServer(boost::asio::io_context& io, std::string socket_path, RequestHandler& handler);
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
  void on_session_closed(SessionId id);

  boost::asio::io_context& io_;
  std::string socket_path_;
  RequestHandler& handler_;
  boost::asio::posix::stream_descriptor listener_;
  std::map<SessionId, std::shared_ptr<Session>> sessions_;
  SessionId next_id_ = 1;
  bool stopped_ = false;
};

}  // namespace ibemu
