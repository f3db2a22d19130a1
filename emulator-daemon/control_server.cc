#include "emulator-daemon/control_server.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/log.h"

namespace ibemu {

namespace asio = boost::asio;

namespace {
// A session holds two descriptors (its socket and its inbox ring); the
// daemon keeps this many besides for its own work (rings it dups to answer
// `resolve`, captures, memfds of large replies, the fabric).
constexpr size_t kDescriptorsPerSession = 2;
size_t descriptors_in_reserve(size_t limit) { return 64 + limit / 8; }

size_t sessions_the_descriptor_limit_allows() {
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_cur == RLIM_INFINITY) return 1 << 20;
  const size_t limit = nofile.rlim_cur;
  const size_t reserve = descriptors_in_reserve(limit);
  return limit > reserve + kDescriptorsPerSession ? (limit - reserve) / kDescriptorsPerSession : 1;
}

// After an accept that failed for want of resources, the listener is tried
// again this much later instead of at once: it stays readable, and asking
// again at once would spin.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);
}  // namespace

class ControlServer::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(ControlServer& server, int fd, SessionInfo info)
      : server_(server), socket_(server.io_, fd), info_(std::move(info)) {}

  void start() { do_read(); }
  void close() {
    boost::system::error_code ec;
    socket_.close(ec);
  }
  const SessionInfo& info() const { return info_; }

  bool send_reply(const Json& reply, std::vector<int>& fds) {
    int err = ibemu::send_reply(socket_.native_handle(), reply, fds);
    for (int fd : fds) ::close(fd);
    fds.clear();
    return err == 0;
  }

 private:
  void do_read() {
    socket_.async_wait(asio::posix::descriptor::wait_read,
                       [self = shared_from_this()](const boost::system::error_code& ec) {
                         self->on_readable(ec);
                       });
  }

  void on_readable(const boost::system::error_code& ec) {
    if (ec) {  // operation_aborted: the server is stopping
      finish();
      return;
    }
    Json request;
    std::vector<int> fds_in, fds_out;
    int err = recv_message(socket_.native_handle(), &request, &fds_in);
    if (err == EAGAIN) return do_read();
    if (err == EPROTO || err == ENODATA) {
      send_reply({{"ok", false},
                  {"error", err == EPROTO ? "request is not a JSON object" : "empty message"},
                  {"errno", EPROTO}},
                 fds_out);
      for (int fd : fds_in) ::close(fd);
      return do_read();
    }
    if (err) {
      finish();
      return;
    }
    Json reply = server_.handler_.on_request(info_, request, fds_in, fds_out);
    for (int fd : fds_in) ::close(fd);  // whatever the handler did not keep
    if (!reply.is_null() && !send_reply(reply, fds_out)) {
      finish();
      return;
    }
    if (!server_.stopped_) do_read();
  }

  void finish() {
    if (finished_) return;
    finished_ = true;
    close();
    server_.on_session_closed(info_.id);
  }

  ControlServer& server_;
  asio::posix::stream_descriptor socket_;
  SessionInfo info_;
  bool finished_ = false;
};

ControlServer::ControlServer(asio::io_context& io, std::string socket_path, RequestHandler& handler,
                             uint32_t sessions_per_user)
    : io_(io),
      socket_path_(std::move(socket_path)),
      handler_(handler),
      listener_(io),
      accept_backoff_(io),
      spare_fd_(::open("/dev/null", O_RDONLY | O_CLOEXEC)),
      sessions_per_user_(sessions_per_user),
      max_sessions_(sessions_the_descriptor_limit_allows()) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof(addr.sun_path))
    throw std::runtime_error("socket path too long: " + socket_path_);
  std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw std::runtime_error("socket: " + std::string(std::strerror(errno)));
  ::unlink(socket_path_.c_str());  // stale: the runtime lock says no daemon owns it
  mode_t old = umask(0077);
  int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  umask(old);
  if (rc != 0 || listen(fd, 64) != 0) {
    int err = errno;
    ::close(fd);
    throw std::runtime_error("cannot listen on " + socket_path_ + ": " + std::strerror(err));
  }
  chmod(socket_path_.c_str(), 0600);
  listener_.assign(fd);
}

ControlServer::~ControlServer() {
  stop();
  if (spare_fd_ >= 0) ::close(spare_fd_);
}

void ControlServer::start() { do_accept(); }

void ControlServer::do_accept() {
  listener_.async_wait(asio::posix::descriptor::wait_read,
                       [this](const boost::system::error_code& ec) {
                         if (ec || stopped_) return;
                         on_acceptable();
                       });
}

void ControlServer::on_acceptable() {
  int fd = accept4(listener_.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    const bool refused = (err == EMFILE || err == ENFILE) && refuse_without_descriptors();
    if (!refused && err != EAGAIN && err != EINTR && err != ECONNABORTED) {
      accept_backoff_.expires_after(kAcceptBackoff);
      accept_backoff_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec && !stopped_) do_accept();
      });
      return;
    }
    return do_accept();
  }
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred)) {
    // Whom every permission check is about: no credentials, no session.
    log_warn("control socket: a client without credentials was refused: {}", std::strerror(errno));
    ::close(fd);
  } else if (std::string why = refusal(cred.uid); !why.empty()) {
    log_warn("control socket: refused a connection of pid {}: {}", cred.pid, why);
    refuse(fd, why);
  } else {
    SessionInfo info{next_id_++, cred.pid, cred.uid, "unknown"};
    auto session = std::make_shared<Session>(*this, fd, info);
    sessions_[info.id] = session;
    session->start();
  }
  do_accept();
}

std::string ControlServer::refusal(unsigned uid) const {
  if (sessions_.size() >= max_sessions_)
    return fmt::format(
        "ibemud serves {} connections, all its descriptor limit allows (raise the "
        "daemon's ulimit -n)",
        sessions_.size());
  if (uid == 0) return {};
  const auto of_uid = std::count_if(sessions_.begin(), sessions_.end(),
                                    [uid](const auto& s) { return s.second->info().uid == uid; });
  if (size_t(of_uid) >= sessions_per_user_)
    return fmt::format(
        "user {} has {} connections to ibemud, its limit (config "
        "limits.sessions_per_user)",
        uid, of_uid);
  return {};
}

void ControlServer::refuse(int fd, const std::string& why) {
  // Requests already queued are taken first: closing a socket with unread
  // data resets the client's, which then reports the reset before it
  // reads this answer.
  char ignored;
  for (int i = 0; i < 8 && recv(fd, &ignored, 1, MSG_DONTWAIT) >= 0; ++i) {
  }
  send_message(fd, {{"ok", false}, {"errno", EMFILE}, {"error", why}});
  ::close(fd);
}

bool ControlServer::refuse_without_descriptors() {
  if (spare_fd_ < 0) spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (spare_fd_ < 0) return false;
  ::close(spare_fd_);
  const int fd = accept4(listener_.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd >= 0) {
    log_warn("control socket: refused a connection: ibemud has no file descriptors left");
    refuse(fd, "ibemud has no file descriptors left (raise the daemon's ulimit -n)");
  }
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  return fd >= 0;
}

void ControlServer::on_session_closed(SessionId id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  auto keep = it->second;  // the session runs this call; keep it alive until return
  sessions_.erase(it);
  handler_.on_session_closed(keep->info());
}

void ControlServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ec;
  accept_backoff_.cancel();
  listener_.close(ec);
  ::unlink(socket_path_.c_str());
  auto sessions = sessions_;
  for (auto& [id, s] : sessions) s->close();
}

bool ControlServer::reply_later(SessionId id, const Json& reply) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return false;
  std::vector<int> no_fds;
  return it->second->send_reply(reply, no_fds);
}

std::vector<SessionInfo> ControlServer::sessions() const {
  std::vector<SessionInfo> out;
  for (auto& [id, s] : sessions_) out.push_back(s->info());
  return out;
}

}  // namespace ibemu
