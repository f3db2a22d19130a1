#include "common/control_channel.h"

#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/link/sealed_memfd.h"

namespace ibemu {

namespace {
constexpr size_t kMaxFds = 8;
constexpr const char* kReplyInFd = "reply_in_fd";

int send_text(int sock, const std::string& text, const std::vector<int>& fds) noexcept {
  if (text.size() > kMaxControlMessage || fds.size() > kMaxFds) return EMSGSIZE;
  iovec iov{const_cast<char*>(text.data()), text.size()};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  if (!fds.empty()) {
    mh.msg_control = control;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cm), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    if (n >= 0) return 0;
    if (errno != EINTR) return errno;
  }
}

// A reply's text in a memfd of exactly its size, sealed so the reader may
// trust the size it sees. Returns the fd or -errno.
int text_in_memfd(const std::string& text) noexcept {
  const int fd = link::create_sealed_memfd("ibemu-reply", text.size());
  if (fd < 0) return fd;
  void* p = mmap(nullptr, text.size(), PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    return -err;
  }
  std::memcpy(p, text.data(), text.size());
  munmap(p, text.size());
  return fd;
}

// The text of a reply sent as {"reply_in_fd": N}: the memfd is the last fd.
int read_reply_in_fd(Json* msg, std::vector<int>* fds) noexcept {
  uint64_t bytes = 0;
  if (fds->empty() || !reply_uint(*msg, kReplyInFd, kMaxReply, &bytes) || bytes == 0) return EPROTO;
  const int fd = fds->back();
  fds->pop_back();
  const long size = link::sealed_memfd_size(fd);
  int err = size < 0 ? -static_cast<int>(size) : static_cast<uint64_t>(size) < bytes ? EPROTO : 0;
  void* p = err ? MAP_FAILED : mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (!err && p == MAP_FAILED) err = errno;
  ::close(fd);
  if (err) return err;
  try {
    const char* text = static_cast<const char*>(p);
    *msg = Json::parse(text, text + bytes);
  } catch (...) {
    err = EPROTO;
  }
  munmap(p, bytes);
  if (!err && !msg->is_object()) err = EPROTO;
  return err;
}
}  // namespace

int send_message(int sock, const Json& msg, const std::vector<int>& fds) noexcept {
  try {
    return send_text(sock, msg.dump(), fds);
  } catch (...) {
    return EINVAL;
  }
}

int send_reply(int sock, const Json& reply, const std::vector<int>& fds) noexcept {
  std::string text;
  try {
    text = reply.dump();
  } catch (...) {
    return EINVAL;
  }
  if (text.size() <= kInlineReplyMax) return send_text(sock, text, fds);
  if (fds.size() >= kMaxFds) return EMSGSIZE;
  const int fd = text_in_memfd(text);
  if (fd < 0) return -fd;
  std::vector<int> with_text = fds;
  with_text.push_back(fd);
  const int err = send_text(sock, Json{{kReplyInFd, text.size()}}.dump(), with_text);
  ::close(fd);
  return err;
}

int recv_message(int sock, Json* msg, std::vector<int>* fds) noexcept {
  // Size the buffer to the message (SOCK_SEQPACKET keeps boundaries; MSG_TRUNC
  // reports the full length) instead of clearing a megabyte every time.
  ssize_t want;
  do {
    want = recv(sock, nullptr, 0, MSG_PEEK | MSG_TRUNC);
  } while (want < 0 && errno == EINTR);
  if (want < 0) return errno;
  std::string buf(std::clamp<size_t>(static_cast<size_t>(want), 1, kMaxControlMessage), '\0');
  iovec iov{buf.data(), buf.size()};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  mh.msg_control = control;
  mh.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
      if (fds)
        fds->push_back(fd);
      else
        ::close(fd);
    }
  }
  if (n == 0) {
    // A SOCK_SEQPACKET record may be empty: only a hung-up peer is the end.
    pollfd p{sock, POLLRDHUP, 0};
    const bool hung_up = poll(&p, 1, 0) < 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
    return hung_up ? ECONNRESET : ENODATA;
  }
  try {
    *msg = Json::parse(buf.begin(), buf.begin() + n);
  } catch (...) {
    return EPROTO;
  }
  if (!msg->is_object()) return EPROTO;
  return 0;
}

ControlClient::~ControlClient() { close(); }

int ControlClient::connect(const std::string& socket_path) noexcept {
  close();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) return ENAMETOOLONG;
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    ::close(fd);
    return err;
  }
  fd_ = fd;
  return 0;
}

void ControlClient::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int ControlClient::request(const Json& req, Json* reply, const std::vector<int>& fds_out,
                           std::vector<int>* fds_in) noexcept {
  if (fd_ < 0) return ENOTCONN;
  std::vector<int> received;
  pthread_mutex_lock(&mutex_);
  int err = send_message(fd_, req, fds_out);
  // A daemon that refuses the connection (too many sessions) answers and
  // closes before it reads: the send may fail, but the answer is there.
  if (!err || err == EPIPE || err == ECONNRESET) {
    err = recv_message(fd_, reply, &received);
    // Closed with our request unread, the daemon's socket resets ours: the
    // reset is reported once, ahead of the answer queued before it.
    if (err == ECONNRESET) err = recv_message(fd_, reply, &received);
  }
  pthread_mutex_unlock(&mutex_);
  if (!err && reply->contains(kReplyInFd)) err = read_reply_in_fd(reply, &received);
  if (!err && !reply->is_object()) err = EPROTO;
  if (err) *reply = Json::object();
  for (int fd : received)
    if (!err && fds_in)
      fds_in->push_back(fd);
    else
      ::close(fd);
  return err;
}

int reply_errno(int request_rc, const Json& reply, int fallback) noexcept {
  if (request_rc) return EIO;
  if (!reply.is_object()) return fallback;
  const auto ok = reply.find("ok");
  if (ok != reply.end() && ok->is_boolean() && ok->get<bool>()) return 0;
  uint64_t err = 0;
  return reply_uint(reply, "errno", 4095, &err) && err > 0 ? static_cast<int>(err) : fallback;
}

bool reply_uint(const Json& reply, const char* key, uint64_t max, uint64_t* out) noexcept {
  if (!reply.is_object()) return false;
  const auto it = reply.find(key);
  if (it == reply.end() || !it->is_number_integer()) return false;
  if (!it->is_number_unsigned() && it->get<int64_t>() < 0) return false;
  const uint64_t v = it->get<uint64_t>();
  if (v > max) return false;
  *out = v;
  return true;
}

uint64_t reply_uint_or(const Json& reply, const char* key, uint64_t fallback) noexcept {
  uint64_t v = fallback;
  return reply_uint(reply, key, ~uint64_t{0}, &v) ? v : fallback;
}

bool reply_ok(const Json& reply) noexcept {
  if (!reply.is_object()) return false;
  const auto it = reply.find("ok");
  return it != reply.end() && it->is_boolean() && it->get<bool>();
}

std::string daemon_not_running_message(const std::string& socket_path) {
  // A socket this user may not reach is another user's daemon, not a
  // missing one: "start it" would only fail again.
  ControlClient probe;
  if (probe.connect(socket_path) == EACCES)
    return "ibemud's socket " + socket_path +
           " is not yours to use (permission denied): ask its owner, or run a fabric of your "
           "own in a runtime directory of your own (-r DIR or IBEMU_RUNTIME_DIR)";
  return "ibemud is not running (start it with: ibemu up); no daemon answers on " + socket_path;
}

}  // namespace ibemu
