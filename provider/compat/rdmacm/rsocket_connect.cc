// Connection set-up and tear-down: rbind, rlisten, raccept, rconnect, the
// CM events that drive them, and the Hello each side puts in its REQ or REP.
#include <cerrno>
#include <chrono>
#include <cstring>

#include "provider/compat/rdmacm/rsocket_socket.h"

namespace ibemu::rsock {

namespace {

constexpr int kResolveTimeoutMs = 2000;
// Without SO_LINGER, rclose still waits this long for sent data to land:
// there is no thread to finish it after rclose returns.
constexpr int kDefaultLingerMs = 10000;

/// errno for a CM event that ends an rconnect.
int connect_error(const rdma_cm_event& e) {
  switch (e.event) {
    case RDMA_CM_EVENT_REJECTED:
      return ECONNREFUSED;
    case RDMA_CM_EVENT_UNREACHABLE:
      return e.status == -ETIMEDOUT ? ETIMEDOUT : ECONNREFUSED;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return e.status < 0 && -e.status != ENODEV ? -e.status : EHOSTUNREACH;
    default:
      return e.status < 0 ? -e.status : ECONNREFUSED;
  }
}

}  // namespace

Hello Socket::hello() const {
  Hello h{};
  h.magic = to_wire32(kHelloMagic);
  h.version = to_wire16(kProtocolVersion);
  h.ring_addr = to_wire64(uint64_t(uintptr_t(ring_)));
  h.ring_rkey = to_wire32(ring_mr_->rkey);
  h.ring_size = to_wire32(uint32_t(rx_.size()));
  h.data_credits = to_wire32(opt_.rqsize);
  return h;
}

bool Socket::take_hello(const void* data, size_t len) {
  if (!data || len < sizeof(Hello)) return false;
  Hello h;
  std::memcpy(&h, data, sizeof h);
  if (from_wire32(h.magic) != kHelloMagic || from_wire16(h.version) != kProtocolVersion ||
      !h.ring_size || !h.data_credits)
    return false;
  peer_ring_addr_ = from_wire64(h.ring_addr);
  peer_ring_rkey_ = from_wire32(h.ring_rkey);
  peer_data_credits_ = from_wire32(h.data_credits);
  tx_.reset(from_wire32(h.ring_size), peer_data_credits_);
  return true;
}

rdma_conn_param Socket::conn_param(const Hello* hello) const {
  rdma_conn_param p{};
  p.private_data = hello;
  p.private_data_len = sizeof *hello;
  p.responder_resources = 1;
  p.initiator_depth = 1;
  p.retry_count = 7;
  // Infinite: a control message that meets an empty receive queue waits
  // for the peer to post again rather than breaking the connection.
  p.rnr_retry_count = 7;
  return p;
}

int Socket::bind(const sockaddr* addr, socklen_t) {
  Lock lock(mu_);
  if (state_ != State::kIdle) return fail(EINVAL);
  return rdma_bind_addr(id_, const_cast<sockaddr*>(addr));
}

int Socket::listen(int backlog) {
  Lock lock(mu_);
  if (state_ == State::kListening) {
    backlog_ = backlog > 0 ? backlog : 1;
    return 0;
  }
  if (state_ != State::kIdle) return fail(EINVAL);
  if (rdma_listen(id_, backlog)) return -1;
  backlog_ = backlog > 0 ? backlog : 1;
  state_ = State::kListening;
  return 0;
}

int Socket::connect(const sockaddr* addr, socklen_t) {
  Lock lock(mu_);
  if (state_ == State::kConnecting) progress();
  if (state_ == State::kConnecting) return fail(EALREADY);
  if (state_ == State::kConnected || state_ == State::kAccepting) return fail(EISCONN);
  if (state_ == State::kFailed) {
    // The outcome of a non-blocking rconnect, told once.
    const int err = so_error_ ? so_error_ : ECONNREFUSED;
    so_error_ = 0;
    return fail(err);
  }
  if (state_ != State::kIdle) return fail(EINVAL);
  if (!addr) return fail(EFAULT);
  if (rdma_resolve_addr(id_, nullptr, const_cast<sockaddr*>(addr), kResolveTimeoutMs)) return -1;
  state_ = State::kConnecting;
  if (nonblocking_) return fail(EINPROGRESS);
  for (;;) {
    progress();
    if (closing_) return fail(EBADF);
    if (state_ != State::kConnecting) break;
    wait(lock);
  }
  if (state_ == State::kConnected) return 0;
  const int err = so_error_ ? so_error_ : ECONNREFUSED;
  so_error_ = 0;
  return fail(err);
}

int Socket::accept(sockaddr* addr, socklen_t* len) {
  PendingRequest request;
  {
    Lock lock(mu_);
    if (state_ != State::kListening) return fail(EINVAL);
    for (;;) {
      progress();
      if (closing_) return fail(EBADF);
      if (!requests_.empty()) break;
      if (nonblocking_) return fail(EAGAIN);
      wait(lock);
    }
    request = requests_.front();
    requests_.pop_front();
  }
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch || rdma_migrate_id(request.id, ch)) {
    const int err = errno;
    rdma_reject(request.id, nullptr, 0);
    rdma_destroy_id(request.id);
    if (ch) rdma_destroy_event_channel(ch);
    return fail(err);
  }
  std::shared_ptr<Socket> child = adopt(ch, request.id);
  if (!child) {
    const int err = errno;
    rdma_reject(request.id, nullptr, 0);
    rdma_destroy_id(request.id);
    rdma_destroy_event_channel(ch);
    return fail(err);
  }
  {
    Lock lock(mu_);
    child->opt_ = opt_;
  }
  Lock lock(child->mu_);
  int err = 0;
  if (!child->take_hello(&request.hello, sizeof request.hello)) {
    err = ECONNABORTED;
  } else if (child->create_resources()) {
    err = errno;
  } else {
    const Hello ours = child->hello();
    const rdma_conn_param param = child->conn_param(&ours);
    if (rdma_accept(request.id, const_cast<rdma_conn_param*>(&param))) err = errno;
  }
  if (err) {
    rdma_reject(request.id, nullptr, 0);
    lock.unlock();
    close(child->fd());
    return fail(err);
  }
  // Writes wait for the RTU (ESTABLISHED); what the peer sends before it is
  // already welcome.
  child->state_ = State::kAccepting;
  if (addr && len) child->name_locked(addr, len, true);
  return child->fd();
}

void Socket::on_connect_request(rdma_cm_event* e) {
  PendingRequest r{e->id, {}};
  const bool ours = e->param.conn.private_data_len >= sizeof(Hello) && e->param.conn.private_data &&
                    (std::memcpy(&r.hello, e->param.conn.private_data, sizeof r.hello), true) &&
                    from_wire32(r.hello.magic) == kHelloMagic;
  if (!ours || int(requests_.size()) >= backlog_) {
    rdma_reject(e->id, nullptr, 0);
    discard_.push_back(e->id);
    return;
  }
  requests_.push_back(r);
}

void Socket::fail_connect(int err) {
  so_error_ = err;
  state_ = State::kFailed;
}

void Socket::on_cm_event(rdma_cm_event* e) {
  if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST) return on_connect_request(e);
  if (e->id != id_) {
    // A request not yet accepted gave up: forget it.
    for (auto it = requests_.begin(); it != requests_.end(); ++it) {
      if (it->id != e->id) continue;
      requests_.erase(it);
      discard_.push_back(e->id);
      break;
    }
    return;
  }
  switch (e->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (state_ == State::kConnecting && rdma_resolve_route(id_, kResolveTimeoutMs))
        fail_connect(errno);
      break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      if (state_ != State::kConnecting) break;
      if (create_resources()) {
        fail_connect(errno);
      } else {
        const Hello ours = hello();
        rdma_conn_param param = conn_param(&ours);
        if (rdma_connect(id_, &param)) fail_connect(errno);
      }
      break;
    case RDMA_CM_EVENT_ESTABLISHED:
      if (state_ == State::kAccepting) {
        state_ = State::kConnected;
      } else if (state_ == State::kConnecting) {
        if (take_hello(e->param.conn.private_data, e->param.conn.private_data_len)) {
          state_ = State::kConnected;
        } else {
          // Not an rsocket at the other end.
          rdma_disconnect(id_);
          fail_connect(ECONNREFUSED);
        }
      }
      break;
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_CONNECT_ERROR:
      if (state_ == State::kConnecting) {
        fail_connect(connect_error(*e));
      } else if (state_ == State::kAccepting) {
        so_error_ = ECONNABORTED;
        state_ = State::kDisconnected;
        peer_eof_ = true;
      }
      break;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      if (state_ == State::kConnected || state_ == State::kAccepting) {
        state_ = State::kDisconnected;
        if (e->event == RDMA_CM_EVENT_DEVICE_REMOVAL) so_error_ = ECONNRESET;
      }
      peer_eof_ = true;
      break;
    default:
      break;
  }
}

void Socket::linger_and_disconnect(Lock& lock) {
  if (state_ != State::kConnected && state_ != State::kAccepting) return;
  using Clock = std::chrono::steady_clock;
  const linger& l = opt_.linger_opt;
  const int limit_ms = l.l_onoff ? l.l_linger * 1000 : kDefaultLingerMs;
  const auto deadline = Clock::now() + std::chrono::milliseconds(limit_ms);
  auto left_ms = [&] {
    return int(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
  };
  // The end of stream goes first, so that the peer reads everything before
  // it and then 0, rather than losing the tail to the disconnect.
  while (!write_shut_ && state_ == State::kConnected && limit_ms > 0) {
    if (send_control(ControlKind::kEndOfStream) == 0) {
      write_shut_ = true;
      break;
    }
    if (left_ms() <= 0 || !wait(lock, left_ms())) break;
  }
  while (state_ == State::kConnected &&
         (writes_in_flight_ || free_control_slots_.size() < kControlSlots) && left_ms() > 0)
    wait(lock, left_ms());
  if (state_ == State::kConnected || state_ == State::kAccepting) {
    rdma_disconnect(id_);
    state_ = State::kDisconnected;
  }
}

}  // namespace ibemu::rsock
