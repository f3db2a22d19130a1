#pragma once
// The control protocol between ibemud and its clients (provider, SM, CLI):
// one JSON object per SOCK_SEQPACKET message on the daemon's Unix socket, with
// file descriptors (shared-memory rings, the state page) passed as SCM_RIGHTS.
// Every request has "op"; every reply has "ok" and, when false, "error" and
// "errno". docs/control-protocol.md lists the operations.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

namespace ibemu {

using Json = nlohmann::json;

/// Largest control message a socket record carries (requests, and replies
/// up to kInlineReplyMax).
inline constexpr size_t kMaxControlMessage = 1 << 20;
/// Replies longer than this travel in a sealed memfd: a SOCK_SEQPACKET record
/// must fit the sender's socket buffer (about 208 KiB by default), and a
/// status of a large fabric does not.
inline constexpr size_t kInlineReplyMax = 64 * 1024;
/// The most a client reads of a reply in a memfd.
inline constexpr size_t kMaxReply = size_t{256} << 20;

/// Sends one message with optional fds. Returns 0 or an errno.
int send_message(int sock, const Json& msg, const std::vector<int>& fds = {}) noexcept;

/// Sends a reply: in the record when it is short; else the record is
/// {"reply_in_fd": BYTES} and the JSON text is in a sealed memfd passed after
/// `fds` (docs/control-protocol.md, "Large replies"). Returns 0 or an errno.
int send_reply(int sock, const Json& reply, const std::vector<int>& fds = {}) noexcept;

/// Receives one message. Received fds are appended to *fds (or closed when
/// fds is null). Returns 0, ECONNRESET on orderly close, ENODATA for an
/// empty record, EPROTO on bad JSON, or an errno.
int recv_message(int sock, Json* msg, std::vector<int>* fds) noexcept;

/// A blocking client connection to ibemud. Thread-safe: one request at a time.
class ControlClient {
 public:
  ControlClient() = default;
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  /// Connects to the socket; returns 0 or an errno (ENOENT/ECONNREFUSED when
  /// no daemon runs there).
  int connect(const std::string& socket_path) noexcept;
  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void close() noexcept;

  /// Sends a request and waits for its reply. Returns 0 with *reply set
  /// (check reply["ok"]), or an errno when the daemon is unreachable. *reply
  /// is a JSON object either way (empty after an error; EPROTO for a reply
  /// that is not an object), so value() on it never throws for its type.
  int request(const Json& req, Json* reply, const std::vector<int>& fds_out = {},
              std::vector<int>* fds_in = nullptr) noexcept;

 private:
  int fd_ = -1;
  pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;
};

/// What a request's outcome means for a caller that must not throw (the
/// provider runs under C callers, where an exception aborts the program):
/// 0 when the request went through and the reply says "ok"; EIO when the
/// daemon did not answer (it is the HCA's firmware: a dead one is a
/// catastrophic error); else the reply's "errno", or `fallback` when it has
/// none that is a positive integer.
int reply_errno(int request_rc, const Json& reply, int fallback) noexcept;

/// An unsigned integer field of a reply that fits `max`, or false.
bool reply_uint(const Json& reply, const char* key, uint64_t max, uint64_t* out) noexcept;
/// An unsigned integer field of a reply, or `fallback` when it has none
/// (or one of another type: a reply never makes its reader throw).
uint64_t reply_uint_or(const Json& reply, const char* key, uint64_t fallback) noexcept;
/// Whether the reply says "ok": true.
bool reply_ok(const Json& reply) noexcept;

/// The message users see when no daemon answers on the socket (or when it
/// is another user's, which they may not reach).
std::string daemon_not_running_message(const std::string& socket_path);

}  // namespace ibemu
