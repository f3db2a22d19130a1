#include "emulator-daemon/kernel_context.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/hex.h"
#include "common/log.h"
#include "emulator-daemon/kernel_records.h"

namespace ibemu {

using engine::CompletionQueue;
using engine::QpState;
using engine::WcOpcode;
using engine::WcStatus;

namespace {

template <typename Record>
const Record& as(const uint8_t* record) {
  // Records are whole and 8-byte aligned in the reader's buffer (checked).
  return *reinterpret_cast<const Record*>(record);
}

// A kernel DMA MR covers every address but 0: the module checks each copy
// against the kernel's direct map (kernel_memory.h).
constexpr uint64_t kDmaMrLength = UINT64_MAX;

}  // namespace

KernelContext::KernelContext(uint8_t index, KernelMemory::Copy copy, std::function<void()> wake)
    : index_(index), copy_(std::move(copy)), wake_(std::move(wake)) {}

KernelContext::~KernelContext() {
  // The QPs go before the CQs their completions land in.
  stop_progress();
  std::lock_guard lock(mutex_);
  for (auto& [qpn, kqp] : qps_) engine().destroy_qp(qpn);
  qps_.clear();
}

int KernelContext::open(const RuntimePaths& paths, const std::string& ibdev, uint32_t qpn_first,
                        uint32_t qpn_count) {
  if (int err = open_engine(paths, ibdev.c_str(), "kernel")) return err;
  if (device_index() != index_) return ENODEV;
  Json reply;
  const int rc = daemon().request({{"op", "kernel_plane"},
                                   {"device", index_},
                                   {"qpn_first", qpn_first},
                                   {"qpn_count", qpn_count}},
                                  &reply);
  if (rc || !reply_ok(reply)) return reply_errno(rc, reply, EIO);
  start_progress();
  return 0;
}

void KernelContext::apply(const ibemu_data_hdr& hdr, const uint8_t* record) noexcept {
  switch (hdr.type) {
    case IBEMU_DATA_CREATE_CQ:
      return create_cq(as<ibemu_data_create_cq>(record));
    case IBEMU_DATA_DESTROY_CQ:
      return destroy_cq(as<ibemu_data_destroy_cq>(record));
    case IBEMU_DATA_REG_DMA_MR:
      return reg_dma_mr(as<ibemu_data_reg_dma_mr>(record));
    case IBEMU_DATA_ALLOC_MR:
      return alloc_mr(as<ibemu_data_alloc_mr>(record));
    case IBEMU_DATA_DEREG_MR:
      return dereg_mr(as<ibemu_data_dereg_mr>(record));
    case IBEMU_DATA_CREATE_SRQ:
      return create_srq(as<ibemu_data_create_srq>(record));
    case IBEMU_DATA_MODIFY_SRQ:
      return modify_srq(as<ibemu_data_modify_srq>(record));
    case IBEMU_DATA_DESTROY_SRQ:
      return destroy_srq(as<ibemu_data_destroy_srq>(record));
    case IBEMU_DATA_CREATE_QP:
      return create_qp(as<ibemu_data_create_qp>(record));
    case IBEMU_DATA_MODIFY_QP:
      return modify_qp(as<ibemu_data_modify_qp>(record));
    case IBEMU_DATA_DESTROY_QP:
      return destroy_qp(as<ibemu_data_destroy_qp>(record));
    case IBEMU_DATA_MCAST_ATTACH:
    case IBEMU_DATA_MCAST_DETACH:
      return mcast(as<ibemu_data_mcast>(record), hdr.type == IBEMU_DATA_MCAST_ATTACH);
    case IBEMU_DATA_SEND_WQE:
      return post_send(as<ibemu_data_send_wqe>(record));
    case IBEMU_DATA_RECV_WQE:
      return post_recv(as<ibemu_data_recv_wqe>(record));
    default:
      // The reader passes commands and WQEs only (checked records).
      counters_.refused++;
      log_error("kernel plane: {} record type {} is not a command", device().name, hdr.type);
  }
}

void KernelContext::create_cq(const ibemu_data_create_cq& r) {
  auto cq = std::make_shared<Cq>();
  cq->handle = r.cq;
  // As deep as the module's own: the engine's entries leave as soon as the
  // forwarder runs, the module's only when the ULP polls.
  const uint32_t capacity = std::min(r.cqe, engine::DeviceLimits::kMaxCqe);
  cq->cq = std::make_unique<CompletionQueue>(
      capacity, [this, handle = r.cq] { mark_dirty(handle); },
      [this, handle = r.cq] { raise(IBEMU_DATA_EVENT_ON_CQ, handle, IBEMU_DATA_EVENT_CQ_ERR); });
  // Kept armed: every completion wakes the forwarder (collect re-arms).
  cq->cq->arm(false);
  std::lock_guard lock(mutex_);
  if (!cqs_.emplace(r.cq, std::move(cq)).second) {
    counters_.refused++;
    log_error("kernel plane: {} CQ {} exists already", device().name, r.cq);
  }
}

void KernelContext::destroy_cq(const ibemu_data_destroy_cq& r) {
  std::lock_guard lock(mutex_);
  if (!cqs_.erase(r.cq)) counters_.refused++;
}

void KernelContext::reg_dma_mr(const ibemu_data_reg_dma_mr& r) {
  auto memory = std::make_shared<KernelMemory>(copy_, index_, IBEMU_DATA_MR_HANDLE(r.key), 0);
  added_mr(r.key, false,
           engine().mrs().add_with_key(r.key, r.pd, nullptr, 0, kDmaMrLength, r.access, memory));
}

// Free until a REG_MR WQE registers it; its copies name the mapping each
// registration brings (KernelMemory::bind).
void KernelContext::alloc_mr(const ibemu_data_alloc_mr& r) {
  auto memory = std::make_shared<KernelMemory>(copy_, index_, IBEMU_DATA_MR_HANDLE(r.key), 0);
  added_mr(r.key, true, engine().mrs().alloc_fast_reg(r.key, r.pd, memory));
}

void KernelContext::added_mr(uint32_t key, bool fast_reg, int err) {
  std::lock_guard lock(mutex_);
  if (err) {
    counters_.refused++;
    log_error("kernel plane: {} {} MR {:#x}: {}", device().name, fast_reg ? "FRWR" : "DMA", key,
              std::strerror(err));
    return;
  }
  mrs_[IBEMU_DATA_MR_HANDLE(key)] = KernelMr{key, fast_reg};
}

void KernelContext::dereg_mr(const ibemu_data_dereg_mr& r) {
  KernelMr mr;
  {
    std::lock_guard lock(mutex_);
    auto it = mrs_.find(r.mr);
    if (it == mrs_.end()) {
      counters_.refused++;
      return;
    }
    mr = it->second;
    mrs_.erase(it);
  }
  // Waits for copies through it in flight, outside the lock. An FRWR MR
  // goes whatever its key is now (deregistration invalidates it).
  if (mr.fast_reg)
    engine().mrs().free_fast_reg(mr.key);
  else
    engine().mrs().remove(mr.key);
}

// The engine's SRQ disarms its limit when it fires (one event per arming),
// as the module's shadow does when the event arrives.
void KernelContext::create_srq(const ibemu_data_create_srq& r) {
  auto srq = std::make_shared<engine::SharedReceiveQueue>(
      std::min(r.max_wr, engine::DeviceLimits::kMaxSrqWr),
      std::min(r.max_sge, engine::DeviceLimits::kMaxSge), [this, handle = r.srq] {
        raise(IBEMU_DATA_EVENT_ON_SRQ, handle, IBEMU_DATA_EVENT_SRQ_LIMIT_REACHED);
      });
  if (r.srq_limit) srq->arm_limit(r.srq_limit);
  std::lock_guard lock(mutex_);
  if (!srqs_.emplace(r.srq, std::move(srq)).second) {
    counters_.refused++;
    log_error("kernel plane: {} SRQ {} exists already", device().name, r.srq);
  }
}

void KernelContext::modify_srq(const ibemu_data_modify_srq& r) {
  std::shared_ptr<engine::SharedReceiveQueue> srq = find_srq(r.srq);
  if (!srq || srq->arm_limit(r.srq_limit) != 0) counters_.refused++;
}

// The QPs on it went first (ib_core refuses it otherwise); its WQEs go with it.
void KernelContext::destroy_srq(const ibemu_data_destroy_srq& r) {
  std::lock_guard lock(mutex_);
  if (!srqs_.erase(r.srq)) counters_.refused++;
}

void KernelContext::create_qp(const ibemu_data_create_qp& r) {
  std::lock_guard lock(mutex_);
  auto send_cq = cqs_.find(r.send_cq);
  auto recv_cq = cqs_.find(r.recv_cq);
  auto srq = r.srq ? srqs_.find(r.srq) : srqs_.end();
  if (send_cq == cqs_.end() || recv_cq == cqs_.end() || (r.srq && srq == srqs_.end()) ||
      qps_.count(r.qpn)) {
    counters_.refused++;
    log_error("kernel plane: {} QP {:#x}: no such CQ or SRQ, or the QP exists", device().name,
              r.qpn);
    return;
  }
  engine::QpInit init;
  init.type = kernel_records::qp_type(r.qp_type);
  init.qpn = r.qpn;
  init.pd = r.pd;
  init.send_cq = send_cq->second->cq.get();
  init.recv_cq = recv_cq->second->cq.get();
  init.max_send_wr = r.max_send_wr;
  init.max_recv_wr = r.max_recv_wr;
  init.max_send_sge = r.max_send_sge;
  init.max_recv_sge = r.max_recv_sge;
  init.max_inline_data = r.max_inline_data;
  init.sq_sig_all = r.sq_sig_all != 0;
  KernelQp kqp;
  kqp.send_cq = send_cq->second;
  kqp.recv_cq = recv_cq->second;
  if (r.srq) {
    kqp.srq = srq->second;
    init.srq = kqp.srq.get();
  }
  kqp.qp = engine().create_qp(init, [this](uint32_t qpn, engine::QpEvent event) {
    raise(IBEMU_DATA_EVENT_ON_QP, qpn, uint8_t(event));
  });
  qps_.emplace(r.qpn, std::move(kqp));
}

void KernelContext::modify_qp(const ibemu_data_modify_qp& r) {
  std::shared_ptr<engine::Qp> qp;
  {
    std::lock_guard lock(mutex_);
    auto it = qps_.find(r.qpn);
    if (it == qps_.end()) {
      counters_.refused++;
      return;
    }
    it->second.modify_seq = r.modify_seq;
    // A QP reset or re-armed: its next error gets its own QP_STATE event.
    it->second.reported_error = false;
    qp = it->second.qp;
  }
  engine::QpAttr attr;
  uint32_t mask = 0;
  kernel_records::to_qp_attr(r, &attr, &mask);
  if (int err = qp->modify(attr, mask)) {
    // The module checked the transition against its shadow; the engine
    // disagreeing is a bug of one of them, and the module hears of the
    // state the QP is really in.
    counters_.refused++;
    log_error("kernel plane: {} QP {:#x}: modify to state {} refused: {}", device().name, r.qpn,
              r.qp_state, std::strerror(err));
    raise(IBEMU_DATA_EVENT_ON_QP, r.qpn, IBEMU_DATA_EVENT_QP_STATE);
  }
}

void KernelContext::destroy_qp(const ibemu_data_destroy_qp& r) {
  KernelQp kqp;
  {
    std::lock_guard lock(mutex_);
    auto it = qps_.find(r.qpn);
    if (it == qps_.end()) {
      counters_.refused++;
      return;
    }
    kqp = std::move(it->second);
    qps_.erase(it);
  }
  engine().destroy_qp(r.qpn);
  // Its completions must not reach the module after it (their QP is gone
  // there already).
  kqp.send_cq->cq->purge_qp(r.qpn);
  if (kqp.recv_cq != kqp.send_cq) kqp.recv_cq->cq->purge_qp(r.qpn);
}

void KernelContext::mcast(const ibemu_data_mcast& r, bool attach) {
  std::array<uint8_t, 16> mgid;
  std::memcpy(mgid.data(), r.mgid, mgid.size());
  const int err = attach ? engine().attach_mcast(r.qpn, mgid, r.mlid)
                         : engine().detach_mcast(r.qpn, mgid, r.mlid);
  if (err) {
    counters_.refused++;
    log_error("kernel plane: {} QP {:#x}: multicast {:#x}: {}", device().name, r.qpn, r.mlid,
              std::strerror(err));
    return;
  }
  // Senders on this host and the fabric find the group's members through
  // the daemon, as they find a program's.
  Json reply;
  const int rc = daemon().request({{"op", attach ? "mcast_attach" : "mcast_detach"},
                                   {"device", index_},
                                   {"qpn", r.qpn},
                                   {"mlid", r.mlid},
                                   {"mgid", to_hex(r.mgid, sizeof(r.mgid))}},
                                  &reply);
  if (rc || !reply_ok(reply)) {
    counters_.refused++;
    log_error("kernel plane: {} QP {:#x}: the daemon refused multicast {:#x}", device().name, r.qpn,
              r.mlid);
  }
}

void KernelContext::post_send(const ibemu_data_send_wqe& r) {
  counters_.send_wqes++;
  std::shared_ptr<engine::Qp> qp;
  std::shared_ptr<Cq> cq;
  {
    std::lock_guard lock(mutex_);
    auto it = qps_.find(r.qpn);
    if (it == qps_.end()) return;  // destroyed since: its WQEs went with it
    qp = it->second.qp;
    cq = it->second.send_cq;
  }
  engine::SendWqe wqe;
  int bad = 0;
  if (kernel_records::to_send_wqe(r, &wqe) != 0 || qp->post_send(&wqe, 1, &bad) != 0)
    refuse_wqe(cq, r.qpn, r.token, WcOpcode::kSend);
}

void KernelContext::post_recv(const ibemu_data_recv_wqe& r) {
  counters_.recv_wqes++;
  if (r.srq) return post_srq_recv(r);
  std::shared_ptr<engine::Qp> qp;
  std::shared_ptr<Cq> cq;
  {
    std::lock_guard lock(mutex_);
    auto it = qps_.find(r.qpn);
    if (it == qps_.end()) return;
    qp = it->second.qp;
    cq = it->second.recv_cq;
  }
  engine::RecvWqe wqe;
  int bad = 0;
  if (kernel_records::to_recv_wqe(r, &wqe) != 0 || qp->post_recv(&wqe, 1, &bad) != 0)
    refuse_wqe(cq, r.qpn, r.token, WcOpcode::kRecv);
}

void KernelContext::post_srq_recv(const ibemu_data_recv_wqe& r) {
  std::shared_ptr<engine::SharedReceiveQueue> srq = find_srq(r.srq);
  if (!srq) return;  // destroyed since: its WQEs went with it
  engine::RecvWqe wqe;
  int bad = 0;
  if (kernel_records::to_recv_wqe(r, &wqe) == 0 && srq->post(&wqe, 1, &bad) == 0) return;
  // The module checked the WQE against the SRQ it created: the engine
  // refusing it is a bug of one of them. No QP owns the WQE yet, so no CQ
  // can report it; the SRQ is broken, as an HCA reports a catastrophic SRQ
  // error (IBA 11.6.3.3).
  counters_.refused++;
  log_error("kernel plane: {} SRQ {}: a WQE refused", device().name, r.srq);
  raise(IBEMU_DATA_EVENT_ON_SRQ, r.srq, IBEMU_DATA_EVENT_SRQ_ERR);
}

void KernelContext::refuse_wqe(const std::shared_ptr<Cq>& cq, uint32_t qpn, uint64_t token,
                               WcOpcode opcode) {
  counters_.refused++;
  engine::Completion c;
  c.wr_id = token;
  c.status = WcStatus::kLocQpOpErr;
  c.opcode = opcode;
  c.qp_num = qpn;
  cq->cq->push(c, false);
}

void KernelContext::raise(uint8_t object, uint32_t handle, uint8_t event) {
  counters_.events++;
  {
    std::lock_guard lock(mutex_);
    events_.push_back(PendingEvent{object, handle, event});
  }
  wake_();
}

void KernelContext::mark_dirty(uint32_t cq_handle) {
  {
    std::lock_guard lock(mutex_);
    dirty_cqs_.push_back(cq_handle);
  }
  wake_();
}

std::shared_ptr<engine::SharedReceiveQueue> KernelContext::find_srq(uint32_t handle) const {
  std::lock_guard lock(mutex_);
  auto it = srqs_.find(handle);
  return it == srqs_.end() ? nullptr : it->second;
}

std::shared_ptr<KernelContext::Cq> KernelContext::find_cq(uint32_t handle) const {
  std::lock_guard lock(mutex_);
  auto it = cqs_.find(handle);
  return it == cqs_.end() ? nullptr : it->second;
}

bool KernelContext::append(std::vector<uint8_t>& out, size_t limit, const void* record,
                           size_t len) {
  if (out.size() + len > limit) return false;
  const auto* bytes = static_cast<const uint8_t*>(record);
  out.insert(out.end(), bytes, bytes + len);
  return true;
}

bool KernelContext::collect(std::vector<uint8_t>& out, size_t limit) {
  std::vector<uint32_t> dirty;
  std::vector<PendingEvent> events;
  {
    std::lock_guard lock(mutex_);
    dirty.swap(dirty_cqs_);
    events.swap(events_);
  }
  std::sort(dirty.begin(), dirty.end());
  dirty.erase(std::unique(dirty.begin(), dirty.end()), dirty.end());
  // A QP whose error completion went out gets its new state right after it
  // (the engine moved it to ERR or SQE on its own; no event says so).
  std::vector<uint32_t> failed_qps;
  bool left = false;
  for (uint32_t handle : dirty) {
    std::shared_ptr<Cq> cq = find_cq(handle);
    if (!cq) continue;  // destroyed since
    const size_t record = sizeof(ibemu_data_cqe);
    const size_t room = out.size() < limit ? (limit - out.size()) / record : 0;
    cq->cq->poll_each(
        int(std::min<size_t>(room, INT32_MAX)), [&](const engine::Completion& c, bool solicited) {
          const ibemu_data_cqe r = kernel_records::to_cqe(c, handle, solicited, index_);
          append(out, limit, &r, sizeof r);
          if (c.status != WcStatus::kSuccess && c.status != WcStatus::kWrFlushErr)
            failed_qps.push_back(c.qp_num);
        });
    if (!cq->cq->empty()) {
      left = true;
      std::lock_guard lock(mutex_);
      dirty_cqs_.push_back(handle);
    } else {
      cq->cq->arm(false);  // fires at once for one that raced in
    }
  }
  for (uint32_t qpn : failed_qps)
    events.push_back(PendingEvent{IBEMU_DATA_EVENT_ON_QP, qpn, IBEMU_DATA_EVENT_QP_STATE});
  for (size_t i = 0; i < events.size(); ++i) {
    const PendingEvent& e = events[i];
    ibemu_data_event r{};
    if (e.object == IBEMU_DATA_EVENT_ON_QP) {
      std::shared_ptr<engine::Qp> qp;
      uint32_t modify_seq;
      {
        std::lock_guard lock(mutex_);
        auto it = qps_.find(e.handle);
        if (it == qps_.end()) continue;  // destroyed since
        if (e.event == IBEMU_DATA_EVENT_QP_STATE) {
          if (it->second.reported_error) continue;
          it->second.reported_error = true;
        }
        qp = it->second.qp;
        modify_seq = it->second.modify_seq;
      }
      // Outside mutex_: the engine raises events and completions (which
      // take it) while it holds the QP's own lock.
      r = kernel_records::qp_event(index_, e.handle, e.event, qp->state(), modify_seq);
    } else {
      r = kernel_records::object_event(index_, e.object, e.handle, e.event);
    }
    if (!append(out, limit, &r, sizeof r)) {
      // The rest wait for the next batch, in order.
      std::lock_guard lock(mutex_);
      events_.insert(events_.begin(), events.begin() + long(i), events.end());
      left = true;
      break;
    }
  }
  return left;
}

Json KernelContext::status() const {
  std::lock_guard lock(mutex_);
  const auto fast_reg_mrs =
      std::count_if(mrs_.begin(), mrs_.end(), [](const auto& mr) { return mr.second.fast_reg; });
  return {{"device", device().name},
          {"qps", qps_.size()},
          {"cqs", cqs_.size()},
          {"mrs", mrs_.size()},
          {"srqs", srqs_.size()},
          {"fast_reg_mrs", fast_reg_mrs},
          {"send_wqes", counters_.send_wqes.load()},
          {"recv_wqes", counters_.recv_wqes.load()},
          {"events", counters_.events.load()},
          {"refused", counters_.refused.load()}};
}

}  // namespace ibemu
