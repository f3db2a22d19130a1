// The stream: rsend and rrecv through the rings, control messages, credit
// reports, rshutdown, and what rpoll sees.
#include <arpa/inet.h>
#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include "provider/compat/rdmacm/rsocket_socket.h"

namespace ibemu::rsock {

namespace {

size_t total_length(const iovec* iov, int iovcnt) {
  size_t total = 0;
  for (int i = 0; i < iovcnt; ++i) total += iov[i].iov_len;
  return total;
}

/// Copies `n` bytes between `flat` and the iovecs, starting `at` bytes into
/// them; `into_iov` says which way.
void copy_iov(const iovec* iov, int iovcnt, size_t at, uint8_t* flat, size_t n, bool into_iov) {
  for (int i = 0; i < iovcnt && n; ++i) {
    if (at >= iov[i].iov_len) {
      at -= iov[i].iov_len;
      continue;
    }
    const size_t k = std::min(n, iov[i].iov_len - at);
    auto* p = static_cast<uint8_t*>(iov[i].iov_base) + at;
    if (into_iov) {
      std::memcpy(p, flat, k);
    } else {
      std::memcpy(flat, p, k);
    }
    flat += k;
    n -= k;
    at = 0;
  }
}

}  // namespace

int Socket::send_control(ControlKind kind, const ControlMessage* body) {
  if (!id_->qp || (state_ != State::kConnected && state_ != State::kAccepting))
    return fail(ENOTCONN);
  if (free_control_slots_.empty()) return fail(EAGAIN);
  const uint32_t slot = free_control_slots_.back();
  ControlMessage m = body ? *body : ControlMessage{};
  m.kind = to_wire32(uint32_t(kind));
  m.bytes_consumed = to_wire64(report_.consumed());
  m.receives_reposted = to_wire64(report_.reposted());
  uint8_t* buf = control_ + size_t(receive_slots_ + slot) * kControlBufferSize;
  std::memcpy(buf, &m, sizeof m);
  ibv_sge sge{uint64_t(uintptr_t(buf)), uint32_t(sizeof m), control_mr_->lkey};
  ibv_send_wr wr{};
  ibv_send_wr* bad;
  wr.wr_id = make_wr_id(WrKind::kControl, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  if (int err = ibv_post_send(id_->qp, &wr, &bad)) return fail(err);
  free_control_slots_.pop_back();
  report_.reported();
  return 0;
}

void Socket::settle_credits(bool all) {
  if (state_ != State::kConnected && state_ != State::kAccepting) return;
  if (!report_.owed() || (!all && !report_.due(rx_.size(), opt_.rqsize))) return;
  // Without a free slot, the completion that frees one calls this again.
  send_control(ControlKind::kCredits);
}

int Socket::post_write(uint64_t wr_id, const void* local, size_t length, uint32_t lkey,
                       uint64_t remote_addr, uint32_t rkey, bool with_imm) {
  ibv_sge sge{uint64_t(uintptr_t(local)), uint32_t(length), lkey};
  ibv_send_wr wr{};
  ibv_send_wr* bad;
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  if (with_imm) wr.imm_data = htonl(uint32_t(length));
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  if (int err = ibv_post_send(id_->qp, &wr, &bad)) return fail(err);
  ++writes_in_flight_;
  return 0;
}

bool Socket::writable() const {
  return state_ == State::kConnected && !write_shut_ && writes_in_flight_ < opt_.sqsize &&
         tx_.next(1).length && staging_ring_.reserve(1).length;
}

bool Socket::readable() const {
  return rx_.readable() || peer_eof_ || read_shut_ || state_ == State::kDisconnected ||
         state_ == State::kFailed;
}

int Socket::connection_error() const {
  if (closing_) return EBADF;
  switch (state_) {
    case State::kIdle:
    case State::kListening:
      return ENOTCONN;
    case State::kFailed:
      return so_error_ ? so_error_ : ECONNREFUSED;
    case State::kDisconnected:
      return so_error_ ? so_error_ : EPIPE;
    default:
      return write_shut_ ? EPIPE : 0;
  }
}

ssize_t Socket::sendv(const iovec* iov, int iovcnt, int flags) {
  std::lock_guard<std::mutex> whole(send_mu_);
  Lock lock(mu_);
  const bool nonblocking = nonblocking_ || (flags & MSG_DONTWAIT);
  const size_t total = total_length(iov, iovcnt);
  return send_loop(lock, nonblocking, total, [&](size_t& sent) {
    while (sent < total && writes_in_flight_ < opt_.sqsize) {
      const Extent remote = tx_.next(std::min(total - sent, kMaxWrite));
      const Extent local = staging_ring_.reserve(remote.length);
      if (!local.length) break;
      uint8_t* data = staging_ + local.offset;
      copy_iov(iov, iovcnt, sent, data, local.length, false);
      if (post_write(make_wr_id(WrKind::kStream, local.length), data, local.length,
                     staging_mr_->lkey, peer_ring_addr_ + remote.offset, peer_ring_rkey_, true))
        return -1;
      staging_ring_.commit(local.length);
      tx_.commit(local.length);
      sent += local.length;
    }
    return 0;
  });
}

ssize_t Socket::recvv(const iovec* iov, int iovcnt, int flags) {
  std::lock_guard<std::mutex> whole(recv_mu_);
  Lock lock(mu_);
  const bool nonblocking = nonblocking_ || (flags & MSG_DONTWAIT);
  const bool peek = flags & MSG_PEEK;
  const size_t total = total_length(iov, iovcnt);
  size_t got = 0;
  for (;;) {
    progress();
    if (closing_) return fail(EBADF);
    if (read_shut_) return ssize_t(got);
    if (const size_t n = std::min(total - got, rx_.readable())) {
      // Straight from the ring into the program's buffers, wrapping once.
      const size_t pos = size_t(rx_.consumed() % rx_.size());
      const size_t skip = peek ? got : 0;
      const size_t first = std::min(n, rx_.size() - (pos + skip) % rx_.size());
      copy_iov(iov, iovcnt, got, ring_ + (pos + skip) % rx_.size(), first, true);
      copy_iov(iov, iovcnt, got + first, ring_, n - first, true);
      if (!peek) {
        rx_.consume(n);
        report_.set_consumed(rx_.consumed());
        settle_credits(false);
      }
      got += n;
    }
    if (got == total || (got && (peek || !(flags & MSG_WAITALL)))) return ssize_t(got);
    if (peer_eof_ || state_ == State::kDisconnected || state_ == State::kFailed) {
      if (got) return ssize_t(got);
      if (so_error_ && state_ != State::kFailed) return fail(so_error_);
      return 0;
    }
    if (state_ == State::kIdle || state_ == State::kListening) return fail(ENOTCONN);
    if (nonblocking) return got ? ssize_t(got) : fail(EAGAIN);
    wait(lock);
  }
}

int Socket::shutdown(int how) {
  if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) return fail(EINVAL);
  Lock lock(mu_);
  progress();
  if (state_ != State::kConnected && state_ != State::kAccepting && state_ != State::kDisconnected)
    return fail(ENOTCONN);
  if (how != SHUT_WR) read_shut_ = true;
  if (how == SHUT_RDWR) {
    // As the real rsockets: both directions shut means disconnected.
    linger_and_disconnect(lock);
  } else if (how == SHUT_WR) {
    while (!write_shut_ && (state_ == State::kConnected || state_ == State::kAccepting)) {
      if (send_control(ControlKind::kEndOfStream) == 0) {
        write_shut_ = true;
        break;
      }
      if (errno != EAGAIN) break;
      wait(lock);
    }
    write_shut_ = true;
  }
  progress();
  wake_sleepers();
  return 0;
}

short Socket::poll_events(short events, std::vector<pollfd>* sleep_on) {
  Lock lock(mu_);
  progress();
  for (;;) {
    short r = 0;
    switch (state_) {
      case State::kIdle:
        r = POLLOUT | POLLHUP;
        break;
      case State::kListening:
        if (!requests_.empty()) r |= POLLIN;
        break;
      case State::kConnecting:
        break;
      case State::kAccepting:
      case State::kConnected:
        if (readable()) r |= POLLIN;
        if (peer_eof_) r |= POLLRDHUP;
        if (writable() || write_shut_) r |= POLLOUT;
        break;
      case State::kDisconnected:
        r = POLLIN | POLLOUT | POLLHUP | POLLRDHUP;
        if (so_error_) r |= POLLERR;
        break;
      case State::kFailed:
        r = POLLOUT | POLLERR | POLLHUP;
        break;
    }
    r &= short(events | POLLERR | POLLHUP);
    if (r || !sleep_on) return r;
    if (arm()) continue;  // something completed while arming: look again
    wait_fds(sleep_on);
    ++sleepers_;
    return 0;
  }
}

}  // namespace ibemu::rsock
