#pragma once
// One rsocket: a byte stream over an RC connection that rdma_cm sets up,
// speaking the protocol of rsocket_wire.h.
//
// The socket's number is its rdma_cm event channel's fd, a real descriptor,
// so it never collides with the program's own. There is no thread of the
// library's: whichever call holds the socket's lock takes CM events and
// completions (progress). A call that must wait sleeps in poll() on the
// channel, the completion channel and the socket's wake eventfd; a thread
// that makes progress while others sleep writes the wake eventfd, so that
// none misses what another thread took off the channels.
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <cerrno>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "provider/compat/rdmacm/rsocket_flow.h"
#include "provider/compat/rdmacm/rsocket_wire.h"

namespace ibemu::rsock {

/// The sockets API's failure: errno set, -1 returned.
inline int fail(int err) {
  errno = err;
  return -1;
}

/// Control messages in flight from one side at a time; each side posts as
/// many receive WRs beyond the data credits it gives, so they seldom meet
/// an empty receive queue (and when they do, RNR retries wait for it).
inline constexpr uint32_t kControlSlots = 8;
/// The most bytes one stream write or riowrite WR carries.
inline constexpr size_t kMaxWrite = 64 * 1024;

/// What a work request's wr_id says about it: kind in the top byte.
enum class WrKind : uint64_t { kReceive = 1, kControl = 2, kStream = 3, kIowrite = 4 };
inline uint64_t make_wr_id(WrKind kind, uint64_t value) { return uint64_t(kind) << 56 | value; }
inline WrKind wr_kind(uint64_t wr_id) { return WrKind(wr_id >> 56); }
inline uint64_t wr_value(uint64_t wr_id) { return wr_id & ((uint64_t(1) << 56) - 1); }

enum class State {
  kIdle,          // new, perhaps bound
  kListening,     // rlisten
  kConnecting,    // rconnect under way: address, route, REQ
  kAccepting,     // accepted, waiting for the RTU
  kConnected,     // data flows (each direction may be shut down)
  kDisconnected,  // the connection is gone; what arrived can still be read
  kFailed,        // rconnect failed: SO_ERROR says why
};

/// Settings a program may change with rsetsockopt; a listener passes its
/// own to the sockets it accepts.
struct Options {
  size_t rcvbuf = 128 * 1024;  // the receive ring
  size_t sndbuf = 128 * 1024;  // the staging ring
  uint32_t sqsize = 128;       // stream writes in flight
  uint32_t rqsize = 128;       // receive WRs the peer's stream writes may use
  uint32_t inline_size = 64;
  uint32_t iomap_size = 0;  // regions the peer may riowrite: none unless set
  bool reuseaddr = false;
  bool keepalive = false;
  int keepidle = 7200;  // seconds, as Linux's default
  bool nodelay = false;
  bool oobinline = false;
  bool v6only = false;
  linger linger_opt{0, 0};
};

class Socket {
 public:
  ~Socket();

  /// A new unconnected socket: its number, or -1 with errno.
  static int create(int domain, bool nonblocking);
  /// The socket numbered `fd`, or null with errno ENOTSOCK. It stays valid
  /// while held, even across an rclose by another thread.
  static std::shared_ptr<Socket> find(int fd);
  /// rclose: finishes sending, disconnects, gives the number back.
  static int close(int fd);

  int fd() const { return channel_->fd; }

  int bind(const sockaddr* addr, socklen_t len);
  int listen(int backlog);
  int accept(sockaddr* addr, socklen_t* len);
  int connect(const sockaddr* addr, socklen_t len);
  int shutdown(int how);

  ssize_t sendv(const iovec* iov, int iovcnt, int flags);
  ssize_t recvv(const iovec* iov, int iovcnt, int flags);

  off_t iomap(void* buf, size_t len, int prot, int flags, off_t offset);
  int iounmap(void* buf, size_t len);
  ssize_t iowrite(const void* buf, size_t count, off_t offset, int flags);

  /// rpoll: which of `events` hold now, after taking what arrived. When
  /// none does, `sleep_on` gets the fds to wait on and the socket counts
  /// the caller as a sleeper until done_sleeping().
  short poll_events(short events, std::vector<pollfd>* sleep_on);
  void done_sleeping();

  int setsockopt(int level, int name, const void* val, socklen_t len);
  int getsockopt(int level, int name, void* val, socklen_t* len);
  int fcntl(int cmd, long arg);
  int name(sockaddr* addr, socklen_t* len, bool peer);

 private:
  Socket(rdma_event_channel* channel, rdma_cm_id* id, int wake_fd);
  static std::shared_ptr<Socket> adopt(rdma_event_channel* channel, rdma_cm_id* id);

  using Lock = std::unique_lock<std::mutex>;

  // Connection set-up and CM events (rsocket_connect.cc).
  void on_cm_event(rdma_cm_event* e);  // ids to destroy go to discard_
  void on_connect_request(rdma_cm_event* e);
  int create_resources();  // PD, CQ, QP, rings; the id knows its device
  Hello hello() const;
  bool take_hello(const void* data, size_t len);
  rdma_conn_param conn_param(const Hello* hello) const;
  void fail_connect(int err);
  void linger_and_disconnect(Lock& lock);
  void destroy_resources();

  // Progress and waiting (rsocket_progress.cc).
  void progress();
  bool take_completions();
  void on_completion(const ibv_wc& wc);
  void on_control(const ControlMessage& m);
  void forget_peer_region(off_t offset);
  int post_receive(uint32_t slot);
  /// Sleeps until something may have changed, or `timeout_ms` passes.
  /// Returns false if the timeout passed.
  bool wait(Lock& lock, int timeout_ms = -1);
  /// Arms the CQ for the next completion; true if completions came first
  /// (then nothing is armed and the caller should look again).
  bool arm();
  void wait_fds(std::vector<pollfd>* out);
  void wake_sleepers();
  void done_sleeping_locked();

  // What every sending call does around the bytes it moves: progress, wait
  // while the connection is being set up, stop at its error, let push(sent)
  // send what room allows (it returns 0 to go on, or an errno, or -1 with
  // errno already set), then return what was sent or wait for more room.
  template <typename Push>
  ssize_t send_loop(Lock& lock, bool nonblocking, size_t total, Push&& push) {
    size_t sent = 0;
    for (;;) {
      progress();
      if (state_ == State::kConnecting || state_ == State::kAccepting) {
        if (nonblocking) return fail(EAGAIN);
        wait(lock);
        continue;
      }
      if (int err = connection_error()) return sent ? ssize_t(sent) : fail(err);
      if (const int stop = push(sent)) return sent ? ssize_t(sent) : stop < 0 ? -1 : fail(stop);
      if (sent == total) return ssize_t(sent);
      if (nonblocking) return sent ? ssize_t(sent) : fail(EAGAIN);
      wait(lock);
    }
  }

  // The stream (rsocket_data.cc).
  int send_control(ControlKind kind, const ControlMessage* body = nullptr);
  void settle_credits(bool all);
  int post_write(uint64_t wr_id, const void* local, size_t length, uint32_t lkey,
                 uint64_t remote_addr, uint32_t rkey, bool with_imm);
  bool writable() const;
  bool readable() const;
  int connection_error() const;
  int name_locked(sockaddr* addr, socklen_t* len, bool peer);

  rdma_event_channel* channel_;
  rdma_cm_id* id_;
  const int wake_fd_;

  // Whole sends and whole receives each happen one at a time; `mu_` guards
  // everything below and is never held while sleeping.
  std::mutex send_mu_, recv_mu_, mu_;
  int sleepers_ = 0;
  bool closing_ = false;

  State state_ = State::kIdle;
  int so_error_ = 0;
  bool nonblocking_ = false;
  bool write_shut_ = false;  // our end of stream is sent (or queued)
  bool read_shut_ = false;   // the program shut reading down
  bool peer_eof_ = false;    // the peer's end of stream arrived
  Options opt_;
  int backlog_ = 0;

  struct PendingRequest {
    rdma_cm_id* id;
    Hello hello;
  };
  std::deque<PendingRequest> requests_;
  std::vector<rdma_cm_id*> discard_;  // destroyed once their event is acked

  // Verbs resources, created once the id knows its device.
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* comp_ = nullptr;
  ibv_cq* cq_ = nullptr;
  uint32_t send_wrs_ = 0;  // SQ depth for stream writes and riowrites
  uint32_t receive_slots_ = 0;
  uint8_t* ring_ = nullptr;
  uint8_t* staging_ = nullptr;
  uint8_t* control_ = nullptr;  // receive buffers, then send slots
  ibv_mr* ring_mr_ = nullptr;
  ibv_mr* staging_mr_ = nullptr;
  ibv_mr* control_mr_ = nullptr;
  std::vector<uint32_t> free_control_slots_;
  uint32_t writes_in_flight_ = 0;

  // The stream's state on both sides.
  ReceiveRing rx_;
  CreditReport report_;
  SendWindow tx_;
  StagingRing staging_ring_;
  uint64_t peer_ring_addr_ = 0;
  uint32_t peer_ring_rkey_ = 0;
  uint32_t peer_data_credits_ = 0;

  // riomap regions: ours (the peer may write them; PROT_NONE ones are only
  // sources of riowrite), and the peer's.
  struct Region {
    off_t offset;
    uint64_t addr;
    size_t length;
    uint32_t rkey;
    ibv_mr* mr;  // ours only
    bool remote_writable;
  };
  std::vector<Region> local_regions_, peer_regions_;
  off_t next_offset_ = 0;
};

/// rclose of a repoll instance (rsocket_epoll.cc): whether `fd` was one; it
/// is closed then.
bool close_repoll(int fd);

}  // namespace ibemu::rsock
