#pragma once
// One rsocket: a byte stream over an RC connection that rdma_cm sets up.
//
// The wire protocol is ibemu's own (both ends always run this library):
// every message is a SEND with immediate data naming its kind — stream
// bytes, end of stream, or an iomap announcement (offset, address, length,
// rkey of a region the peer may riowrite into). Each side posts a fixed
// number of receive buffers and reposts one when the program has read it;
// a sender that finds none waits on RNR NAKs with infinite retries, so the
// QP itself is the flow control. riowrite is an RDMA WRITE into the peer's
// announced region, ordered with the stream like everything on the QP.
//
// The socket's number is its rdma_cm event channel's fd: a real descriptor,
// so it never collides with the program's own. No thread of its own: calls
// poll the CQ and the channel, and blocking calls sleep on their fds.
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/mman.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace ibemu::rsock {

enum class MessageKind : uint32_t { kData = 1, kEndOfStream = 2, kIomap = 3, kIounmap = 4 };

struct IomapAnnouncement {
  uint64_t offset;
  uint64_t addr;
  uint64_t length;
  uint32_t rkey;
  uint32_t reserved;
};

enum class State { kIdle, kListening, kConnecting, kConnected, kClosed, kFailed };

class Stream {
 public:
  /// A new unconnected socket: its number, or -1 with errno.
  static int create(int domain);
  /// The socket numbered `fd`, or nullptr (errno ENOTSOCK).
  static Stream* find(int fd);
  /// rclose: disconnects, frees everything.
  static int close(int fd);

  int fd() const { return channel_->fd; }
  std::mutex mu;

  int bind(const sockaddr* addr);
  int listen();
  int accept(sockaddr* addr, socklen_t* len);
  int connect(const sockaddr* addr);
  ssize_t send(const void* buf, size_t len, int flags);
  ssize_t recv(void* buf, size_t len, int flags);
  int shutdown(int how);
  off_t iomap(void* buf, size_t len, int prot, off_t offset);
  int iounmap(void* buf, size_t len);
  ssize_t iowrite(const void* buf, size_t count, off_t offset, int flags);

  /// rpoll: what of `events` the socket has now (after doing what arrived).
  short ready(short events);
  /// The fds to sleep on until the socket may have more to report.
  void wait_fds(std::vector<pollfd>* out);

  int setsockopt(int level, int name, const void* val, socklen_t len);
  int getsockopt(int level, int name, void* val, socklen_t* len);
  int fcntl(int cmd, int arg);
  int sockname(sockaddr* addr, socklen_t* len, bool peer);

 private:
  explicit Stream(rdma_event_channel* ch, rdma_cm_id* id);
  ~Stream();

  int setup_connection();  // QP, CQ, buffers for a connecting or accepted id
  void progress();         // takes CM events and completions
  void on_cm_event(rdma_cm_event* e);
  void on_completion(const ibv_wc& wc);
  int post_recv(size_t slot);
  int post_message(MessageKind kind, const void* data, size_t len);
  int free_send_slot();
  bool nonblocking(int flags) const { return nonblock_ || (flags & MSG_DONTWAIT); }
  /// Sleeps until the CQ or the channel has something, or `timeout_ms`.
  void sleep(int timeout_ms);

  rdma_event_channel* channel_;
  rdma_cm_id* id_;
  State state_ = State::kIdle;
  int so_error_ = 0;
  bool nonblock_ = false;
  bool eof_received_ = false;
  bool eof_sent_ = false;
  bool read_shut_ = false;
  std::deque<rdma_cm_id*> pending_accepts_;

  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* comp_ = nullptr;
  ibv_cq* cq_ = nullptr;
  size_t slot_size_ = 16384;
  size_t send_slots_ = 32, recv_slots_ = 32;
  int sndbuf_ = 1 << 19, rcvbuf_ = 1 << 19;
  std::vector<uint8_t> send_buf_, recv_buf_;
  ibv_mr* send_mr_ = nullptr;
  ibv_mr* recv_mr_ = nullptr;
  std::vector<size_t> free_send_;
  struct Arrived {
    size_t slot;
    size_t length;
    size_t consumed;
  };
  std::deque<Arrived> arrived_;

  struct Region {
    off_t offset;
    uint64_t addr;
    size_t length;
    uint32_t rkey;
    ibv_mr* mr;  // ours; null for the peer's
  };
  std::vector<Region> local_maps_, peer_maps_;
  off_t next_map_offset_ = 0;
};

}  // namespace ibemu::rsock
