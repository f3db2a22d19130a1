#include "emulator-daemon/umad_service.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <stdexcept>

#include "common/log.h"
#include "common/umad_protocol.h"

namespace ibemu {

namespace asio = boost::asio;

namespace {
// A socket path may be longer than sun_path holds; /proc/self/fd/<dir fd>
// names the directory in a few bytes.
int bind_listener(int dirfd, const std::string& name) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = "/proc/self/fd/" + std::to_string(dirfd) + "/" + name;
  if (path.size() >= sizeof addr.sun_path) return -1;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  unlinkat(dirfd, name.c_str(), 0);
  // The owner only, like the control socket (and like /dev/infiniband/umadN,
  // which is root's).
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 64) != 0 ||
      fchmodat(dirfd, name.c_str(), 0600, 0) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}
}  // namespace

class UmadService::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(asio::io_context& io, int fd, PortRef port, size_t umad)
      : socket(io, fd), port(port), umad(umad) {}
  asio::posix::stream_descriptor socket;
  PortRef port;
  size_t umad = 0;          // the umad number of its port
  UmadClientId client = 0;  // set once OPEN made it a file
  uint64_t token = 0;
  std::vector<uint8_t> buffer = std::vector<uint8_t>(kUmadHeaderSize + kMaxUmadMad);

  void close() {
    boost::system::error_code ec;
    socket.close(ec);
  }
};

UmadService::UmadService(asio::io_context& io, Subnet& subnet)
    : io_(io),
      subnet_(subnet),
      router_(subnet, [this](UmadClientId c, UmadMessage m) { deliver(c, m); }),
      timer_(io) {}

UmadService::~UmadService() { stop(); }

void UmadService::start(const std::string& dir, const std::vector<PortRef>& ports) {
  int dirfd = open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0) throw std::runtime_error("cannot open " + dir + ": " + std::strerror(errno));
  ports_ = ports;
  for (size_t i = 0; i < ports.size(); ++i) {
    const std::string name = "umad" + std::to_string(i);
    int fd = bind_listener(dirfd, name);
    if (fd < 0) {
      int err = errno;
      close(dirfd);
      throw std::runtime_error("cannot listen on " + dir + "/" + name + ": " + std::strerror(err));
    }
    listeners_.push_back(std::make_unique<asio::posix::stream_descriptor>(io_, fd));
    accept(i);
  }
  close(dirfd);
}

void UmadService::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ec;
  timer_.cancel();
  for (auto& l : listeners_) l->close(ec);
  auto files = files_;
  for (auto& [id, c] : files) c->close();
  for (auto& [umad, c] : issm_holders_) c->close();
}

void UmadService::accept(size_t listener) {
  listeners_[listener]->async_wait(
      asio::posix::descriptor::wait_read, [this, listener](const boost::system::error_code& ec) {
        if (ec || stopped_) return;
        int fd = accept4(listeners_[listener]->native_handle(), nullptr, nullptr,
                         SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) {
          // Room for a burst of MADs the program has not read yet.
          int sndbuf = 1 << 20;
          setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
          auto c = std::make_shared<Connection>(io_, fd, ports_[listener], listener);
          c->socket.async_wait(asio::posix::descriptor::wait_read,
                               [this, c](const boost::system::error_code& e) {
                                 if (!e) on_first_message(c);
                               });
        }
        accept(listener);
      });
}

void UmadService::on_first_message(std::shared_ptr<Connection> c) {
  ibemu_umad_request req{};
  ssize_t n = recv(c->socket.native_handle(), &req, sizeof req, MSG_DONTWAIT);
  if (n < 0 && errno == EAGAIN) {
    c->socket.async_wait(asio::posix::descriptor::wait_read,
                         [this, c](const boost::system::error_code& e) {
                           if (!e) on_first_message(c);
                         });
    return;
  }
  ibemu_umad_reply reply{};
  auto answer = [&] { send(c->socket.native_handle(), &reply, sizeof reply, MSG_NOSIGNAL); };
  if (n != static_cast<ssize_t>(sizeof req)) return c->close();
  if (req.op == IBEMU_UMAD_OPEN) {
    std::random_device rd;
    c->client = next_client_++;
    c->token = uint64_t(rd()) << 32 | rd();
    tokens_[c->token] = c->client;
    files_[c->client] = c;
    reply.token = c->token;
    answer();
    c->socket.async_wait(asio::posix::descriptor::wait_read,
                         [this, c](const boost::system::error_code& e) {
                           if (e) return close_file(c->client);
                           on_file_message(c);
                         });
    return;
  }
  if (req.op == IBEMU_UMAD_ISSM) return hold_issm(c);
  auto file = tokens_.find(req.token);
  if (file == tokens_.end()) {
    reply.err = EBADF;
  } else if (req.op == IBEMU_UMAD_REGISTER) {
    AgentRegistration reg;
    reg.qpn = req.qpn;
    reg.mgmt_class = req.mgmt_class;
    reg.class_version = req.mgmt_class_version;
    reg.method_mask = {req.method_mask[0], req.method_mask[1]};
    reg.rmpp_version = req.rmpp_version;
    reply.err =
        router_.register_agent(file->second, files_[file->second]->port, reg, &reply.agent_id);
  } else if (req.op == IBEMU_UMAD_UNREGISTER) {
    reply.err = router_.unregister_agent(file->second, req.agent_id);
  } else if (req.op == IBEMU_UMAD_REGISTER_CM) {
    reply.err = router_.register_cm_endpoint(file->second, files_[file->second]->port,
                                             &reply.agent_id, &reply.comm_id_base);
  } else if (req.op == IBEMU_UMAD_CM_LISTEN || req.op == IBEMU_UMAD_CM_UNLISTEN) {
    reply.err = router_.cm_listen(file->second, req.service_id, req.service_mask,
                                  req.op == IBEMU_UMAD_CM_LISTEN);
  } else {
    reply.err = EINVAL;
  }
  answer();
  c->close();
}

void UmadService::hold_issm(std::shared_ptr<Connection> c) {
  ibemu_umad_reply reply{};
  // One holder per port, as the kernel's issm file is exclusive; an SM
  // attached through the control socket (ibemu-sm) keeps its bit.
  const bool held = issm_holders_.count(c->umad) != 0;
  const bool had_bit = (subnet_.port(c->port).cap_mask & mad::kCapIsSm) != 0;
  if (!held) {
    issm_holders_[c->umad] = c;
    // Before the reply: once open() returns, sysfs and PortInfo say IsSM.
    if (!had_bit) subnet_.set_is_sm(c->port, true);
  }
  reply.err = held ? EBUSY : 0;
  send(c->socket.native_handle(), &reply, sizeof reply, MSG_NOSIGNAL);
  if (held) return c->close();
  // Nothing is read on the file: its closing (or the program's exit) is
  // what the wait sees.
  c->socket.async_wait(asio::posix::descriptor::wait_read,
                       [this, c, had_bit](const boost::system::error_code&) {
                         if (!had_bit && !stopped_) subnet_.set_is_sm(c->port, false);
                         issm_holders_.erase(c->umad);
                         c->close();
                       });
}

void UmadService::on_file_message(std::shared_ptr<Connection> c) {
  for (;;) {
    ssize_t n = recv(c->socket.native_handle(), c->buffer.data(), c->buffer.size(),
                     MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) return close_file(c->client);  // the program closed the file
    if (static_cast<size_t>(n) > c->buffer.size()) {
      log_debug("umad: a {}-byte write is longer than any MAD; dropped", n);
      continue;
    }
    router_.send(c->client, c->buffer.data(), n, MadRouter::Clock::now());
  }
  rearm_timer();
  c->socket.async_wait(asio::posix::descriptor::wait_read,
                       [this, c](const boost::system::error_code& e) {
                         if (e) return close_file(c->client);
                         on_file_message(c);
                       });
}

// The router calls this from inside send()/expire(); it never calls back
// into the router, so the router's state stays consistent.
void UmadService::deliver(UmadClientId client, const UmadMessage& msg) {
  auto it = files_.find(client);
  if (it == files_.end()) return;
  // A program that does not read its file loses MADs, as an overrun QP1
  // receive queue does; MADs are datagrams.
  if (send(it->second->socket.native_handle(), msg.data(), msg.size(),
           MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
    log_debug("umad: a MAD for a file that does not read was dropped: {}", std::strerror(errno));
}

void UmadService::close_file(UmadClientId client) {
  auto it = files_.find(client);
  if (it == files_.end()) return;
  router_.drop_client(client);
  tokens_.erase(it->second->token);
  it->second->close();
  files_.erase(it);
}

void UmadService::rearm_timer() {
  auto next = router_.next_deadline();
  if (!next || stopped_) return;
  timer_.expires_at(*next);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;  // re-armed or stopped
    router_.expire(MadRouter::Clock::now());
    rearm_timer();
  });
}

}  // namespace ibemu
