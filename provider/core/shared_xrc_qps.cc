#include "provider/core/shared_xrc_qps.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "provider/core/core_internal.h"
#include "provider/core/provider_context.h"
#include "transport/engine/context_link.h"

namespace ibemu::provider {

using engine::Delivery;
using engine::MessageHeader;
using engine::MessageKind;

namespace {

enum HandleOp : uint8_t { kOpen, kQuery, kModify, kClose };

// A call that is not answered in this time fails: the QP's context is alive
// (the daemon knew it) but stuck.
constexpr auto kCallTimeout = std::chrono::seconds(5);

struct HandleCall {
  MessageHeader header;
  uint32_t call = 0;  // 0: no reply wanted
  uint8_t op = kOpen;
  uint32_t qpn = 0;
  uint32_t xrcd = 0;
  uint32_t mask = 0;
  engine::QpAttr attr;
};

struct HandleReply {
  MessageHeader header;
  uint32_t call = 0;
  int32_t rc = 0;
  engine::QpAttr attr;
};

struct HandleEvent {
  MessageHeader header;
  uint32_t qpn = 0;
  uint32_t event = 0;  // ibv_event_type
};

static_assert(std::is_trivially_copyable_v<HandleCall> &&
              std::is_trivially_copyable_v<HandleReply> &&
              std::is_trivially_copyable_v<HandleEvent>);

template <typename M>
M message(MessageKind kind, uint64_t from) {
  M m;
  m.header.kind = kind;
  m.header.size = sizeof(M);
  m.header.from = from;
  return m;
}

template <typename M>
const uint8_t* bytes(const M& m) {
  return reinterpret_cast<const uint8_t*>(&m);
}

}  // namespace

struct SharedXrcQps::Reply {
  bool done = false;
  int rc = 0;
  engine::QpAttr attr;
};

void SharedXrcQps::created(uint32_t qpn, uintptr_t handle) {
  std::lock_guard lock(mutex_);
  local_[qpn].handles.push_back(handle);
}

void SharedXrcQps::raise(uint32_t qpn, uint32_t event) noexcept {
  std::vector<uintptr_t> handles;
  std::vector<uint64_t> openers;
  {
    std::lock_guard lock(mutex_);
    auto it = local_.find(qpn);
    if (it == local_.end()) return;
    handles = it->second.handles;
    for (auto& [context, count] : it->second.openers) openers.push_back(context);
  }
  for (uintptr_t h : handles) ctx_.post_async_event(h, event);
  auto m = message<HandleEvent>(MessageKind::kQpHandleEvent, ctx_.session());
  m.qpn = qpn;
  m.event = event;
  for (uint64_t context : openers) ctx_.link().to_context(context, bytes(m), sizeof(m));
}

int SharedXrcQps::open(uint32_t qpn, uint32_t xrcd, uintptr_t handle, uint64_t* owner) {
  // ib_open_qp: the QP must be an XRC receive QP of that domain.
  if (auto qp = ctx_.engine().find_qp(qpn)) {
    std::lock_guard lock(mutex_);
    auto it = local_.find(qpn);
    if (it == local_.end() || qp->type() != engine::QpType::kXrcRecv || qp->xrcd() != xrcd)
      return EINVAL;
    it->second.handles.push_back(handle);
    *owner = ctx_.session();
    return 0;
  }
  Json reply;
  if (ctx_.daemon().request(
          {{"op", "resolve_qp"}, {"device", ctx_.device_index()}, {"qpn", qpn}, {"want_fd", false}},
          &reply) != 0 ||
      !reply_ok(reply))
    return EINVAL;
  *owner = reply_uint_or(reply, "owner", 0);
  if (*owner == ctx_.session()) return EINVAL;  // ours, but no QP here: being destroyed
  if (int err = call(*owner, kOpen, qpn, xrcd, nullptr, 0, nullptr))
    return err == ENODEV ? EINVAL : err;
  std::lock_guard lock(mutex_);
  remote_.emplace(std::make_pair(*owner, qpn), handle);
  return 0;
}

void SharedXrcQps::close(uint64_t owner, uint32_t qpn, uintptr_t handle) {
  if (owner == ctx_.session()) {
    release(qpn, 0, handle);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    auto [first, last] = remote_.equal_range({owner, qpn});
    for (auto it = first; it != last; ++it)
      if (it->second == handle) {
        remote_.erase(it);
        break;
      }
  }
  // Closing never fails: a QP whose context is gone has nothing to close.
  call(owner, kClose, qpn, 0, nullptr, 0, nullptr);
}

int SharedXrcQps::query(uint64_t owner, uint32_t qpn, engine::QpAttr* out) {
  return call(owner, kQuery, qpn, 0, nullptr, 0, out);
}

int SharedXrcQps::modify(uint64_t owner, uint32_t qpn, const engine::QpAttr& attr, uint32_t mask) {
  return call(owner, kModify, qpn, 0, &attr, mask, nullptr);
}

int SharedXrcQps::call(uint64_t owner, uint8_t op, uint32_t qpn, uint32_t xrcd,
                       const engine::QpAttr* attr, uint32_t mask, engine::QpAttr* out) {
  auto m = message<HandleCall>(MessageKind::kQpHandleCall, ctx_.session());
  m.op = op;
  m.qpn = qpn;
  m.xrcd = xrcd;
  m.mask = mask;
  if (attr) m.attr = *attr;
  Reply reply;
  std::unique_lock lock(mutex_);
  if (++next_call_ == 0) ++next_call_;  // 0 asks for no reply
  m.call = next_call_;
  calls_[m.call] = &reply;
  lock.unlock();
  const Delivery d = ctx_.link().to_context(owner, bytes(m), sizeof(m));
  lock.lock();
  if (d == Delivery::kDelivered) replied_.wait_for(lock, kCallTimeout, [&] { return reply.done; });
  calls_.erase(m.call);
  if (d == Delivery::kNoRoute) return ENODEV;  // the QP went with its context
  if (!reply.done) return d == Delivery::kDropped ? EAGAIN : ETIMEDOUT;
  if (out) *out = reply.attr;
  return reply.rc;
}

void SharedXrcQps::receive(const uint8_t* msg, size_t len) noexcept {
  MessageHeader h;
  if (!engine::read_header(msg, len, &h)) return;
  if (h.kind == MessageKind::kQpHandleCall && len == sizeof(HandleCall)) {
    HandleCall c;
    std::memcpy(&c, msg, sizeof(c));
    serve(h.from, c.op, c.call, c.qpn, c.xrcd, c.attr, c.mask);
  } else if (h.kind == MessageKind::kQpHandleReply && len == sizeof(HandleReply)) {
    HandleReply r;
    std::memcpy(&r, msg, sizeof(r));
    std::lock_guard lock(mutex_);
    auto it = calls_.find(r.call);
    if (it == calls_.end()) return;  // the caller gave up
    it->second->done = true;
    it->second->rc = r.rc;
    it->second->attr = r.attr;
    replied_.notify_all();
  } else if (h.kind == MessageKind::kQpHandleEvent && len == sizeof(HandleEvent)) {
    HandleEvent e;
    std::memcpy(&e, msg, sizeof(e));
    std::vector<uintptr_t> handles;
    {
      std::lock_guard lock(mutex_);
      auto [first, last] = remote_.equal_range({h.from, e.qpn});
      for (auto it = first; it != last; ++it) handles.push_back(it->second);
    }
    for (uintptr_t handle : handles) ctx_.post_async_event(handle, e.event);
  }
}

// The QP owner's side of a call from a handle in context `from`.
void SharedXrcQps::serve(uint64_t from, uint8_t op, uint32_t call, uint32_t qpn, uint32_t xrcd,
                         const engine::QpAttr& attr, uint32_t mask) noexcept {
  auto r = message<HandleReply>(MessageKind::kQpHandleReply, ctx_.session());
  r.call = call;
  std::shared_ptr<engine::Qp> qp = ctx_.engine().find_qp(qpn);
  bool shared;
  {
    std::lock_guard lock(mutex_);
    shared = local_.count(qpn) != 0;
  }
  if (!qp || !shared || qp->type() != engine::QpType::kXrcRecv) {
    r.rc = EINVAL;
  } else if (op == kOpen) {
    std::lock_guard lock(mutex_);
    auto it = local_.find(qpn);
    if (it == local_.end() || qp->xrcd() != xrcd)
      r.rc = EINVAL;
    else
      ++it->second.openers[from];
  } else if (op == kQuery) {
    r.attr = qp->query();
  } else if (op == kModify) {
    r.rc = modify_engine_qp(ctx_, *qp, attr, mask);
  } else if (op == kClose) {
    qp.reset();
    release(qpn, from, 0);
  }
  if (call) ctx_.link().to_context(from, bytes(r), sizeof(r));
}

void SharedXrcQps::release(uint32_t qpn, uint64_t opener, uintptr_t handle) {
  {
    std::lock_guard lock(mutex_);
    auto it = local_.find(qpn);
    if (it == local_.end()) return;
    Local& q = it->second;
    if (opener) {
      auto o = q.openers.find(opener);
      if (o != q.openers.end() && --o->second == 0) q.openers.erase(o);
    } else {
      auto h = std::find(q.handles.begin(), q.handles.end(), handle);
      if (h != q.handles.end()) q.handles.erase(h);
    }
    if (!q.handles.empty() || !q.openers.empty()) return;
    local_.erase(it);
  }
  destroy_engine_qp(ctx_, qpn);
}

void SharedXrcQps::context_closing() noexcept {
  std::map<uint32_t, Local> local;
  std::multimap<std::pair<uint64_t, uint32_t>, uintptr_t> remote;
  {
    std::lock_guard lock(mutex_);
    local.swap(local_);
    remote.swap(remote_);
  }
  auto fatal = message<HandleEvent>(MessageKind::kQpHandleEvent, ctx_.session());
  fatal.event = IBV_EVENT_QP_FATAL;
  for (auto& [qpn, q] : local)
    for (auto& [context, count] : q.openers) {
      fatal.qpn = qpn;
      ctx_.link().to_context(context, bytes(fatal), sizeof(fatal));
    }
  auto close = message<HandleCall>(MessageKind::kQpHandleCall, ctx_.session());
  close.op = kClose;
  for (auto& [key, handle] : remote) {
    close.qpn = key.second;
    ctx_.link().to_context(key.first, bytes(close), sizeof(close));
  }
}

}  // namespace ibemu::provider
