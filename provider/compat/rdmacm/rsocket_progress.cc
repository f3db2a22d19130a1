// Progress and sleeping: taking CM events and completions, and waiting for
// them without spinning and without losing a wake-up to another thread.
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "provider/compat/rdmacm/rsocket_socket.h"

namespace ibemu::rsock {

int Socket::post_receive(uint32_t slot) {
  ibv_sge sge{uint64_t(uintptr_t(control_ + size_t(slot) * kControlBufferSize)), kControlBufferSize,
              control_mr_->lkey};
  ibv_recv_wr wr{};
  ibv_recv_wr* bad;
  wr.wr_id = make_wr_id(WrKind::kReceive, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return ibv_post_recv(id_->qp, &wr, &bad);
}

void Socket::progress() {
  bool changed = false;
  rdma_cm_event* e;
  while (rdma_get_cm_event(channel_, &e) == 0) {
    on_cm_event(e);
    rdma_ack_cm_event(e);
    changed = true;
  }
  for (rdma_cm_id* id : discard_) rdma_destroy_id(id);
  discard_.clear();
  // After the CM events: the completions of everything the peer wrote
  // before it disconnected are in the CQ by now and must count before
  // end of stream does.
  if (cq_ && take_completions()) changed = true;
  if (read_shut_ && rx_.readable()) {
    // Nobody will read: keep the peer's writes flowing into the void.
    rx_.consume(rx_.readable());
    report_.set_consumed(rx_.consumed());
  }
  settle_credits(false);
  if (changed) wake_sleepers();
}

bool Socket::take_completions() {
  ibv_cq* ev_cq;
  void* ev_ctx;
  while (ibv_get_cq_event(comp_, &ev_cq, &ev_ctx) == 0) ibv_ack_cq_events(ev_cq, 1);
  bool any = false;
  ibv_wc wc[32];
  for (int n; (n = ibv_poll_cq(cq_, 32, wc)) > 0;) {
    any = true;
    for (int i = 0; i < n; ++i) on_completion(wc[i]);
  }
  return any;
}

void Socket::on_completion(const ibv_wc& wc) {
  const uint64_t value = wr_value(wc.wr_id);
  switch (wr_kind(wc.wr_id)) {
    case WrKind::kControl:
      free_control_slots_.push_back(uint32_t(value));
      break;
    case WrKind::kStream:
    case WrKind::kIowrite:
      staging_ring_.release(size_t(value));
      --writes_in_flight_;
      break;
    case WrKind::kReceive:
      if (wc.status != IBV_WC_SUCCESS) break;
      if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        if (!rx_.on_write(ntohl(wc.imm_data))) {
          so_error_ = EPROTO;  // the peer wrote past the room it had
          state_ = State::kDisconnected;
          peer_eof_ = true;
          rdma_disconnect(id_);
          return;
        }
        report_.on_repost();
      } else if (wc.byte_len >= sizeof(ControlMessage)) {
        ControlMessage m;
        std::memcpy(&m, control_ + value * kControlBufferSize, sizeof m);
        on_control(m);
      }
      post_receive(uint32_t(value));
      return;
  }
  if (wc.status != IBV_WC_SUCCESS && wc.status != IBV_WC_WR_FLUSH_ERR &&
      (state_ == State::kConnected || state_ == State::kAccepting)) {
    // The peer is gone without a disconnect (retries exhausted, or a bad
    // riowrite): the connection is reset.
    so_error_ = ECONNRESET;
    state_ = State::kDisconnected;
    peer_eof_ = true;
    rdma_disconnect(id_);
  }
}

void Socket::on_control(const ControlMessage& m) {
  tx_.on_credits(from_wire64(m.bytes_consumed), from_wire64(m.receives_reposted));
  switch (ControlKind(from_wire32(m.kind))) {
    case ControlKind::kCredits:
      break;
    case ControlKind::kEndOfStream:
      peer_eof_ = true;
      break;
    case ControlKind::kIomap: {
      const off_t offset = off_t(from_wire64(m.region_offset));
      forget_peer_region(offset);
      peer_regions_.push_back({offset, from_wire64(m.region_addr),
                               size_t(from_wire64(m.region_length)), from_wire32(m.region_rkey),
                               nullptr, true});
      break;
    }
    case ControlKind::kIounmap: {
      const off_t offset = off_t(from_wire64(m.region_offset));
      forget_peer_region(offset);
      break;
    }
  }
}

void Socket::forget_peer_region(off_t offset) {
  peer_regions_.erase(std::remove_if(peer_regions_.begin(), peer_regions_.end(),
                                     [&](const Region& r) { return r.offset == offset; }),
                      peer_regions_.end());
}

void Socket::wait_fds(std::vector<pollfd>* out) {
  out->push_back({channel_->fd, POLLIN, 0});
  out->push_back({wake_fd_, POLLIN, 0});
  if (comp_) out->push_back({comp_->fd, POLLIN, 0});
}

bool Socket::arm() {
  if (!cq_) return false;
  ibv_req_notify_cq(cq_, 0);
  // What completed before the arming raises no event: look once more.
  if (!take_completions()) return false;
  settle_credits(false);
  wake_sleepers();
  return true;
}

bool Socket::wait(Lock& lock, int timeout_ms) {
  if (closing_) return true;
  // A peer stalled on credits may be waiting for exactly what we owe.
  settle_credits(true);
  if (arm()) return true;
  std::vector<pollfd> fds;
  wait_fds(&fds);
  ++sleepers_;
  lock.unlock();
  const int n = ::poll(fds.data(), nfds_t(fds.size()), timeout_ms);
  lock.lock();
  done_sleeping_locked();
  progress();
  return n != 0;
}

void Socket::wake_sleepers() {
  if (!sleepers_) return;
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void Socket::done_sleeping_locked() {
  // The last sleeper clears the wake-up: earlier ones leave it for those
  // still on their way into poll().
  if (--sleepers_ == 0) {
    uint64_t count;
    (void)!::read(wake_fd_, &count, sizeof count);
  }
}

void Socket::done_sleeping() {
  std::lock_guard<std::mutex> lock(mu_);
  done_sleeping_locked();
}

}  // namespace ibemu::rsock
