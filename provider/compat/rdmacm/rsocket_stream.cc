#include "provider/compat/rdmacm/rsocket_stream.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <rdma/rsocket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

namespace ibemu::rsock {

namespace {

constexpr int kResolveTimeoutMs = 2000;
constexpr size_t kMinSlots = 4;
constexpr int kLingerMs = 2000;

std::mutex g_table_mu;
std::map<int, Stream*> g_table;

int fail(int err) {
  errno = err;
  return -1;
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

Stream::Stream(rdma_event_channel* ch, rdma_cm_id* id) : channel_(ch), id_(id) {
  set_nonblocking(ch->fd);
  id->context = this;
  std::lock_guard<std::mutex> lock(g_table_mu);
  g_table[ch->fd] = this;
}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lock(g_table_mu);
    g_table.erase(channel_->fd);
  }
  for (Region& r : local_maps_) ibv_dereg_mr(r.mr);
  if (id_->qp) rdma_destroy_qp(id_);
  if (send_mr_) ibv_dereg_mr(send_mr_);
  if (recv_mr_) ibv_dereg_mr(recv_mr_);
  if (cq_) ibv_destroy_cq(cq_);
  if (comp_) ibv_destroy_comp_channel(comp_);
  if (pd_) ibv_dealloc_pd(pd_);
  for (rdma_cm_id* pending : pending_accepts_) {
    rdma_reject(pending, nullptr, 0);
    rdma_destroy_id(pending);
  }
  rdma_destroy_id(id_);
  rdma_destroy_event_channel(channel_);
}

int Stream::create(int domain) {
  if (domain != AF_INET && domain != AF_INET6) return fail(EAFNOSUPPORT);
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) return -1;
  rdma_cm_id* id;
  if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP)) {
    int err = errno;
    rdma_destroy_event_channel(ch);
    return fail(err);
  }
  return (new Stream(ch, id))->fd();
}

Stream* Stream::find(int fd) {
  std::lock_guard<std::mutex> lock(g_table_mu);
  auto it = g_table.find(fd);
  if (it == g_table.end()) {
    errno = ENOTSOCK;
    return nullptr;
  }
  return it->second;
}

int Stream::close(int fd) {
  Stream* s = find(fd);
  if (!s) return fail(EBADF);
  {
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->state_ == State::kConnected) {
      if (!s->eof_sent_) s->shutdown(SHUT_WR);
      // Linger until what was sent is acknowledged: a disconnect flushes
      // the send queue.
      for (int waited = 0; s->free_send_.size() < s->send_slots_ && waited < kLingerMs;
           waited += 10) {
        s->progress();
        if (s->free_send_.size() < s->send_slots_) s->sleep(10);
      }
      rdma_disconnect(s->id_);
    }
  }
  delete s;
  return 0;
}

int Stream::bind(const sockaddr* addr) {
  if (state_ != State::kIdle) return fail(EINVAL);
  return rdma_bind_addr(id_, const_cast<sockaddr*>(addr));
}

int Stream::listen() {
  if (state_ != State::kIdle) return fail(EINVAL);
  if (rdma_listen(id_, 16)) return -1;
  state_ = State::kListening;
  return 0;
}

int Stream::connect(const sockaddr* addr) {
  if (state_ == State::kConnected) return fail(EISCONN);
  if (state_ == State::kConnecting) return fail(EALREADY);
  if (state_ != State::kIdle) return fail(EINVAL);
  if (rdma_resolve_addr(id_, nullptr, const_cast<sockaddr*>(addr), kResolveTimeoutMs)) return -1;
  state_ = State::kConnecting;
  if (nonblock_) return fail(EINPROGRESS);
  while (state_ == State::kConnecting) {
    progress();
    if (state_ == State::kConnecting) sleep(-1);
  }
  if (state_ != State::kConnected) return fail(so_error_ ? so_error_ : ECONNREFUSED);
  return 0;
}

int Stream::accept(sockaddr* addr, socklen_t* len) {
  if (state_ != State::kListening) return fail(EINVAL);
  for (;;) {
    progress();
    if (!pending_accepts_.empty()) break;
    if (nonblock_) return fail(EAGAIN);
    sleep(-1);
  }
  rdma_cm_id* id = pending_accepts_.front();
  pending_accepts_.pop_front();
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) return -1;
  if (rdma_migrate_id(id, ch)) {
    int err = errno;
    rdma_destroy_event_channel(ch);
    return fail(err);
  }
  auto* s = new Stream(ch, id);
  s->sndbuf_ = sndbuf_;
  s->rcvbuf_ = rcvbuf_;
  std::lock_guard<std::mutex> lock(s->mu);
  rdma_conn_param param{};
  param.responder_resources = 1;
  param.initiator_depth = 1;
  param.rnr_retry_count = 7;
  if (s->setup_connection() || rdma_accept(id, &param)) {
    int err = errno;
    delete s;
    return fail(err);
  }
  s->state_ = State::kConnecting;
  while (s->state_ == State::kConnecting) {
    s->progress();
    if (s->state_ == State::kConnecting) s->sleep(-1);
  }
  if (s->state_ != State::kConnected) {
    delete s;
    return fail(ECONNABORTED);
  }
  s->nonblock_ = nonblock_;
  if (addr && len) s->sockname(addr, len, true);
  return s->fd();
}

int Stream::setup_connection() {
  send_slots_ = std::max(kMinSlots, size_t(sndbuf_) / slot_size_);
  recv_slots_ = std::max(kMinSlots, size_t(rcvbuf_) / slot_size_);
  pd_ = ibv_alloc_pd(id_->verbs);
  comp_ = pd_ ? ibv_create_comp_channel(id_->verbs) : nullptr;
  if (!comp_) return -1;
  set_nonblocking(comp_->fd);
  cq_ = ibv_create_cq(id_->verbs, int(send_slots_ + recv_slots_ + 8), this, comp_, 0);
  if (!cq_) return -1;
  send_buf_.resize(send_slots_ * slot_size_);
  recv_buf_.resize(recv_slots_ * slot_size_);
  send_mr_ = ibv_reg_mr(pd_, send_buf_.data(), send_buf_.size(), IBV_ACCESS_LOCAL_WRITE);
  recv_mr_ = ibv_reg_mr(pd_, recv_buf_.data(), recv_buf_.size(), IBV_ACCESS_LOCAL_WRITE);
  if (!send_mr_ || !recv_mr_) return -1;
  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = cq_;
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = 1;
  attr.cap.max_send_wr = uint32_t(send_slots_ + 4);
  attr.cap.max_recv_wr = uint32_t(recv_slots_);
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  if (rdma_create_qp(id_, pd_, &attr)) return -1;
  for (size_t i = 0; i < send_slots_; ++i) free_send_.push_back(i);
  for (size_t i = 0; i < recv_slots_; ++i)
    if (post_recv(i)) return -1;
  return 0;
}

int Stream::post_recv(size_t slot) {
  ibv_sge sge{uint64_t(uintptr_t(recv_buf_.data() + slot * slot_size_)), uint32_t(slot_size_),
              recv_mr_->lkey};
  ibv_recv_wr wr{};
  ibv_recv_wr* bad;
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return ibv_post_recv(id_->qp, &wr, &bad);
}

void Stream::on_cm_event(rdma_cm_event* e) {
  switch (e->event) {
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      pending_accepts_.push_back(e->id);
      break;
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (rdma_resolve_route(id_, kResolveTimeoutMs)) {
        so_error_ = errno;
        state_ = State::kFailed;
      }
      break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
      rdma_conn_param param{};
      param.responder_resources = 1;
      param.initiator_depth = 1;
      param.retry_count = 7;
      param.rnr_retry_count = 7;  // the receiver's reposting is the flow control
      if (setup_connection() || rdma_connect(id_, &param)) {
        so_error_ = errno;
        state_ = State::kFailed;
      }
      break;
    }
    case RDMA_CM_EVENT_ESTABLISHED: {
      state_ = State::kConnected;
      // The smallest RNR NAK timer: a reader that reposts wakes the writer
      // at once rather than after the CM's default 655 ms.
      ibv_qp_attr attr{};
      attr.min_rnr_timer = 1;
      ibv_modify_qp(id_->qp, &attr, IBV_QP_MIN_RNR_TIMER);
      break;
    }
    case RDMA_CM_EVENT_REJECTED:
      so_error_ = ECONNREFUSED;
      state_ = State::kFailed;
      break;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
      so_error_ = e->status < 0 ? -e->status : ECONNREFUSED;
      state_ = State::kFailed;
      break;
    case RDMA_CM_EVENT_DISCONNECTED:
      if (state_ == State::kConnected) state_ = State::kClosed;
      eof_received_ = true;
      break;
    default:
      break;
  }
}

void Stream::on_completion(const ibv_wc& wc) {
  const bool receive = wc.opcode & IBV_WC_RECV;
  if (wc.status != IBV_WC_SUCCESS) {
    if (!receive) free_send_.push_back(size_t(wc.wr_id));
    if (wc.status != IBV_WC_WR_FLUSH_ERR && state_ == State::kConnected) {
      so_error_ = ECONNRESET;
      state_ = State::kClosed;
      eof_received_ = true;
    }
    return;
  }
  if (!receive) {
    free_send_.push_back(size_t(wc.wr_id));
    return;
  }
  const size_t slot = size_t(wc.wr_id);
  const uint8_t* data = recv_buf_.data() + slot * slot_size_;
  switch (MessageKind(ntohl(wc.imm_data))) {
    case MessageKind::kData:
      arrived_.push_back({slot, wc.byte_len, 0});
      return;  // reposted once read
    case MessageKind::kEndOfStream:
      eof_received_ = true;
      break;
    case MessageKind::kIomap: {
      IomapAnnouncement a;
      std::memcpy(&a, data, sizeof a);
      peer_maps_.push_back({off_t(a.offset), a.addr, size_t(a.length), a.rkey, nullptr});
      break;
    }
    case MessageKind::kIounmap: {
      IomapAnnouncement a;
      std::memcpy(&a, data, sizeof a);
      std::erase_if(peer_maps_, [&](const Region& r) { return r.offset == off_t(a.offset); });
      break;
    }
  }
  post_recv(slot);
}

void Stream::progress() {
  rdma_cm_event* e;
  while (rdma_get_cm_event(channel_, &e) == 0) {
    on_cm_event(e);
    rdma_ack_cm_event(e);
  }
  if (!cq_) return;
  ibv_cq* ev_cq;
  void* ctx;
  while (ibv_get_cq_event(comp_, &ev_cq, &ctx) == 0) ibv_ack_cq_events(ev_cq, 1);
  ibv_wc wc[16];
  for (int n; (n = ibv_poll_cq(cq_, 16, wc)) > 0;)
    for (int i = 0; i < n; ++i) on_completion(wc[i]);
}

void Stream::wait_fds(std::vector<pollfd>* out) {
  out->push_back({channel_->fd, POLLIN, 0});
  if (cq_) {
    ibv_req_notify_cq(cq_, 0);
    out->push_back({comp_->fd, POLLIN, 0});
  }
}

void Stream::sleep(int timeout_ms) {
  std::vector<pollfd> fds;
  wait_fds(&fds);
  // A completion that came before the CQ was armed raises no event.
  if (cq_) {
    ibv_wc wc;
    int n = ibv_poll_cq(cq_, 1, &wc);
    if (n > 0) {
      on_completion(wc);
      return;
    }
  }
  ::poll(fds.data(), fds.size(), timeout_ms);
}

int Stream::free_send_slot() {
  for (;;) {
    progress();
    if (!free_send_.empty()) break;
    if (state_ != State::kConnected) return -1;
    sleep(-1);
  }
  int slot = int(free_send_.back());
  free_send_.pop_back();
  return slot;
}

int Stream::post_message(MessageKind kind, const void* data, size_t len) {
  int slot = free_send_slot();
  if (slot < 0) return fail(EPIPE);
  uint8_t* buf = send_buf_.data() + size_t(slot) * slot_size_;
  if (len) std::memcpy(buf, data, len);
  ibv_sge sge{uint64_t(uintptr_t(buf)), uint32_t(len), send_mr_->lkey};
  ibv_send_wr wr{};
  ibv_send_wr* bad;
  wr.wr_id = uint64_t(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.imm_data = htonl(uint32_t(kind));
  if (int err = ibv_post_send(id_->qp, &wr, &bad)) {
    free_send_.push_back(size_t(slot));
    return fail(err);
  }
  return 0;
}

ssize_t Stream::send(const void* buf, size_t len, int flags) {
  size_t sent = 0;
  const auto* p = static_cast<const uint8_t*>(buf);
  for (;;) {
    progress();
    if (state_ == State::kConnecting) {
      if (nonblocking(flags)) return fail(EAGAIN);
      sleep(-1);
      continue;
    }
    if (state_ != State::kConnected || eof_sent_) return sent ? ssize_t(sent) : fail(EPIPE);
    while (sent < len && !free_send_.empty()) {
      const size_t chunk = std::min(slot_size_, len - sent);
      if (post_message(MessageKind::kData, p + sent, chunk)) return sent ? ssize_t(sent) : -1;
      sent += chunk;
    }
    if (sent == len) return ssize_t(sent);
    if (nonblocking(flags)) return sent ? ssize_t(sent) : fail(EAGAIN);
    sleep(-1);
  }
}

ssize_t Stream::recv(void* buf, size_t len, int flags) {
  size_t got = 0;
  auto* p = static_cast<uint8_t*>(buf);
  for (;;) {
    progress();
    if (read_shut_) return ssize_t(got);
    for (auto it = arrived_.begin(); it != arrived_.end() && got < len;) {
      const size_t n = std::min(len - got, it->length - it->consumed);
      std::memcpy(p + got, recv_buf_.data() + it->slot * slot_size_ + it->consumed, n);
      got += n;
      if (flags & MSG_PEEK) {
        ++it;
        continue;
      }
      it->consumed += n;
      if (it->consumed < it->length) break;
      post_recv(it->slot);
      it = arrived_.erase(it);
    }
    const bool all = !(flags & MSG_WAITALL) || got == len;
    if (got && (all || flags & MSG_PEEK)) return ssize_t(got);
    if (eof_received_ && arrived_.empty()) return ssize_t(got);
    if (state_ == State::kFailed) return fail(so_error_ ? so_error_ : ECONNRESET);
    if (state_ == State::kIdle || state_ == State::kListening) return fail(ENOTCONN);
    if (nonblocking(flags)) return got ? ssize_t(got) : fail(EAGAIN);
    sleep(-1);
  }
}

int Stream::shutdown(int how) {
  if (state_ != State::kConnected && state_ != State::kClosed) return fail(ENOTCONN);
  if ((how == SHUT_WR || how == SHUT_RDWR) && !eof_sent_ && state_ == State::kConnected) {
    post_message(MessageKind::kEndOfStream, nullptr, 0);
    eof_sent_ = true;
  }
  if (how == SHUT_RD || how == SHUT_RDWR) read_shut_ = true;
  return 0;
}

off_t Stream::iomap(void* buf, size_t len, int prot, off_t offset) {
  if (state_ != State::kConnected) return fail(ENOTCONN);
  if (!(prot & PROT_WRITE) || !len) return fail(EINVAL);
  if (offset == -1) offset = next_map_offset_;
  ibv_mr* mr = ibv_reg_mr(pd_, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!mr) return -1;
  local_maps_.push_back({offset, uint64_t(uintptr_t(buf)), len, mr->rkey, mr});
  next_map_offset_ = std::max(next_map_offset_, offset + off_t(len));
  IomapAnnouncement a{uint64_t(offset), uint64_t(uintptr_t(buf)), len, mr->rkey, 0};
  if (post_message(MessageKind::kIomap, &a, sizeof a)) return -1;
  return offset;
}

int Stream::iounmap(void* buf, size_t len) {
  auto it = std::find_if(local_maps_.begin(), local_maps_.end(), [&](const Region& r) {
    return r.addr == uint64_t(uintptr_t(buf)) && r.length == len;
  });
  if (it == local_maps_.end()) return fail(EINVAL);
  IomapAnnouncement a{uint64_t(it->offset), it->addr, it->length, it->rkey, 0};
  if (state_ == State::kConnected) post_message(MessageKind::kIounmap, &a, sizeof a);
  ibv_dereg_mr(it->mr);
  local_maps_.erase(it);
  return 0;
}

ssize_t Stream::iowrite(const void* buf, size_t count, off_t offset, int flags) {
  progress();
  auto region = std::find_if(peer_maps_.begin(), peer_maps_.end(), [&](const Region& r) {
    return offset >= r.offset && offset < r.offset + off_t(r.length);
  });
  if (region == peer_maps_.end()) return fail(EINVAL);
  if (state_ != State::kConnected) return fail(EPIPE);
  if (free_send_.empty() && nonblocking(flags)) return fail(EAGAIN);
  int slot = free_send_slot();
  if (slot < 0) return fail(EPIPE);
  const size_t room = size_t(region->offset + off_t(region->length) - offset);
  const size_t chunk = std::min({count, slot_size_, room});
  uint8_t* data = send_buf_.data() + size_t(slot) * slot_size_;
  std::memcpy(data, buf, chunk);
  ibv_sge sge{uint64_t(uintptr_t(data)), uint32_t(chunk), send_mr_->lkey};
  ibv_send_wr wr{};
  ibv_send_wr* bad;
  wr.wr_id = uint64_t(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = region->addr + uint64_t(offset - region->offset);
  wr.wr.rdma.rkey = region->rkey;
  if (int err = ibv_post_send(id_->qp, &wr, &bad)) {
    free_send_.push_back(size_t(slot));
    return fail(err);
  }
  return ssize_t(chunk);
}

short Stream::ready(short events) {
  progress();
  short r = 0;
  switch (state_) {
    case State::kListening:
      if (!pending_accepts_.empty()) r |= POLLIN;
      break;
    case State::kConnected:
      if (!arrived_.empty() || eof_received_) r |= POLLIN;
      if (!free_send_.empty() && !eof_sent_) r |= POLLOUT;
      break;
    case State::kClosed:
      r |= POLLIN | POLLHUP;
      break;
    case State::kFailed:
      r |= POLLOUT | POLLERR;
      break;
    default:
      break;
  }
  return short(r & (events | POLLERR | POLLHUP));
}

int Stream::setsockopt(int level, int name, const void* val, socklen_t len) {
  if (!val) return fail(EFAULT);
  auto as_int = [&] { return len >= sizeof(int) ? *static_cast<const int*>(val) : 0; };
  if (level == SOL_SOCKET && name == SO_SNDBUF) {
    sndbuf_ = std::max(as_int(), int(kMinSlots * slot_size_));
  } else if (level == SOL_SOCKET && name == SO_RCVBUF) {
    rcvbuf_ = std::max(as_int(), int(kMinSlots * slot_size_));
  } else if (level == SOL_SOCKET && (name == SO_REUSEADDR || name == SO_KEEPALIVE ||
                                     name == SO_LINGER || name == SO_OOBINLINE)) {
    if (name == SO_REUSEADDR) {
      int on = as_int();
      rdma_set_option(id_, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof on);
    }
  } else if (level == IPPROTO_TCP && (name == TCP_NODELAY || name == TCP_MAXSEG)) {
    // Every send leaves at once; segments are the stream's slots.
  } else if (level == SOL_RDMA &&
             (name == RDMA_SQSIZE || name == RDMA_RQSIZE || name == RDMA_INLINE ||
              name == RDMA_IOMAPSIZE || name == RDMA_ROUTE)) {
    // Sizes of the real library's queues; this one sizes them from the
    // socket buffers.
  } else {
    return fail(ENOTSUP);
  }
  return 0;
}

int Stream::getsockopt(int level, int name, void* val, socklen_t* len) {
  if (!val || !len || *len < sizeof(int)) return fail(EINVAL);
  int v = 0;
  if (level == SOL_SOCKET && name == SO_ERROR) {
    progress();
    v = so_error_;
    so_error_ = 0;
  } else if (level == SOL_SOCKET && name == SO_SNDBUF) {
    v = sndbuf_;
  } else if (level == SOL_SOCKET && name == SO_RCVBUF) {
    v = rcvbuf_;
  } else if (level == IPPROTO_TCP && name == TCP_MAXSEG) {
    v = int(slot_size_);
  } else if ((level == SOL_SOCKET && (name == SO_REUSEADDR || name == SO_KEEPALIVE)) ||
             (level == IPPROTO_TCP && name == TCP_NODELAY)) {
    v = 1;
  } else {
    return fail(ENOTSUP);
  }
  std::memcpy(val, &v, sizeof v);
  *len = sizeof v;
  return 0;
}

int Stream::fcntl(int cmd, int arg) {
  switch (cmd) {
    case F_GETFL:
      return O_RDWR | (nonblock_ ? O_NONBLOCK : 0);
    case F_SETFL:
      nonblock_ = arg & O_NONBLOCK;
      return 0;
    default:
      return fail(ENOTSUP);
  }
}

int Stream::sockname(sockaddr* addr, socklen_t* len, bool peer) {
  if (!addr || !len) return fail(EFAULT);
  if (peer && state_ != State::kConnected && state_ != State::kClosed) return fail(ENOTCONN);
  const sockaddr* a = peer ? rdma_get_peer_addr(id_) : rdma_get_local_addr(id_);
  const socklen_t size = a->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  std::memcpy(addr, a, std::min(*len, size));
  *len = size;
  return 0;
}

}  // namespace ibemu::rsock
