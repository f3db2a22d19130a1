// The life of an rsocket: its number, the table that finds it, the verbs
// resources of its connection, and rclose.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <unordered_map>

#include "provider/compat/rdmacm/rsocket_socket.h"

namespace ibemu::rsock {

namespace {

std::mutex g_table_mu;
std::unordered_map<int, std::shared_ptr<Socket>> g_table;

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

size_t page_round(size_t n) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

uint8_t* map_buffer(size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

void deregister(ibv_mr*& mr) {
  if (mr) ibv_dereg_mr(mr);
  mr = nullptr;
}

}  // namespace

Socket::Socket(rdma_event_channel* channel, rdma_cm_id* id, int wake_fd)
    : channel_(channel), id_(id), wake_fd_(wake_fd) {
  id->context = this;
}

Socket::~Socket() {
  destroy_resources();
  for (const PendingRequest& r : requests_) {
    rdma_reject(r.id, nullptr, 0);
    rdma_destroy_id(r.id);
  }
  rdma_destroy_id(id_);
  rdma_destroy_event_channel(channel_);
  ::close(wake_fd_);
}

std::shared_ptr<Socket> Socket::adopt(rdma_event_channel* channel, rdma_cm_id* id) {
  // The CM channel is read only when it has something, and sleeping is
  // done in poll(): rdma_get_cm_event must never block.
  set_nonblocking(channel->fd);
  int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) return nullptr;
  std::shared_ptr<Socket> s(new Socket(channel, id, wake_fd));
  std::lock_guard<std::mutex> lock(g_table_mu);
  g_table[channel->fd] = s;
  return s;
}

int Socket::create(int domain, bool nonblocking) {
  if (domain != AF_INET && domain != AF_INET6) return fail(EAFNOSUPPORT);
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) return -1;
  rdma_cm_id* id;
  if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP)) {
    int err = errno;
    rdma_destroy_event_channel(ch);
    return fail(err);
  }
  std::shared_ptr<Socket> s = adopt(ch, id);
  if (!s) {
    int err = errno;
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ch);
    return fail(err);
  }
  s->nonblocking_ = nonblocking;
  return s->fd();
}

std::shared_ptr<Socket> Socket::find(int fd) {
  std::lock_guard<std::mutex> lock(g_table_mu);
  auto it = g_table.find(fd);
  if (it == g_table.end()) {
    errno = ENOTSOCK;
    return nullptr;
  }
  return it->second;
}

int Socket::close(int fd) {
  std::shared_ptr<Socket> s;
  {
    std::lock_guard<std::mutex> lock(g_table_mu);
    auto it = g_table.find(fd);
    if (it == g_table.end()) return fail(EBADF);
    s = std::move(it->second);
    g_table.erase(it);
  }
  Lock lock(s->mu_);
  s->linger_and_disconnect(lock);
  s->closing_ = true;
  s->wake_sleepers();
  // The last holder (perhaps a thread still inside a call) frees it.
  return 0;
}

int Socket::create_resources() {
  ibv_context* verbs = id_->verbs;
  ibv_device_attr dev{};
  if (ibv_query_device(verbs, &dev)) return -1;
  const uint32_t max_wr = uint32_t(std::max(dev.max_qp_wr, 2 * int(kControlSlots) + 2));
  opt_.sqsize = std::clamp<uint32_t>(opt_.sqsize, 1, max_wr - kControlSlots);
  opt_.rqsize = std::clamp<uint32_t>(opt_.rqsize, 1, max_wr - kControlSlots);
  send_wrs_ = opt_.sqsize + kControlSlots;
  receive_slots_ = opt_.rqsize + kControlSlots;

  pd_ = ibv_alloc_pd(verbs);
  if (!pd_) return -1;
  comp_ = ibv_create_comp_channel(verbs);
  if (!comp_) return -1;
  set_nonblocking(comp_->fd);
  cq_ = ibv_create_cq(verbs, int(send_wrs_ + receive_slots_), this, comp_, 0);
  if (!cq_) return -1;

  const size_t ring_size = page_round(opt_.rcvbuf);
  const size_t staging_size = page_round(opt_.sndbuf);
  const size_t control_size =
      page_round(size_t(receive_slots_ + kControlSlots) * kControlBufferSize);
  rx_.reset(ring_size);
  staging_ring_.reset(staging_size);
  report_.reset();
  ring_ = map_buffer(ring_size);
  staging_ = map_buffer(staging_size);
  control_ = map_buffer(control_size);
  if (!ring_ || !staging_ || !control_) return fail(ENOMEM);
  ring_mr_ = ibv_reg_mr(pd_, ring_, ring_size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  staging_mr_ = ibv_reg_mr(pd_, staging_, staging_size, IBV_ACCESS_LOCAL_WRITE);
  control_mr_ = ibv_reg_mr(pd_, control_, control_size, IBV_ACCESS_LOCAL_WRITE);
  if (!ring_mr_ || !staging_mr_ || !control_mr_) return -1;

  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = cq_;
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = 1;
  attr.cap.max_send_wr = send_wrs_;
  attr.cap.max_recv_wr = receive_slots_;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  if (rdma_create_qp(id_, pd_, &attr)) return -1;
  for (uint32_t slot = 0; slot < receive_slots_; ++slot)
    if (int err = post_receive(slot)) return fail(err);
  free_control_slots_.clear();
  for (uint32_t slot = 0; slot < kControlSlots; ++slot) free_control_slots_.push_back(slot);
  return 0;
}

void Socket::destroy_resources() {
  for (Region& r : local_regions_) deregister(r.mr);
  local_regions_.clear();
  if (id_->qp) rdma_destroy_qp(id_);
  deregister(ring_mr_);
  deregister(staging_mr_);
  deregister(control_mr_);
  if (ring_) munmap(ring_, rx_.size());
  if (staging_) munmap(staging_, staging_ring_.size());
  if (control_)
    munmap(control_, page_round(size_t(receive_slots_ + kControlSlots) * kControlBufferSize));
  ring_ = staging_ = control_ = nullptr;
  if (cq_) ibv_destroy_cq(cq_);
  if (comp_) ibv_destroy_comp_channel(comp_);
  if (pd_) ibv_dealloc_pd(pd_);
  cq_ = nullptr;
  comp_ = nullptr;
  pd_ = nullptr;
}

}  // namespace ibemu::rsock
