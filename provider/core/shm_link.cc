#include "provider/core/shm_link.h"

#include <unistd.h>

#include <algorithm>

#include "transport/engine/timing.h"
#include "transport/wire/lrh.h"

namespace ibemu::provider {

namespace {
// A destination that does not exist yet may be created in a moment (the peer
// is still setting up): forget a negative answer quickly.
constexpr auto kNegativeTtl = std::chrono::milliseconds(20);
// How long a multicast group's member list is reused before asking again.
constexpr auto kGroupTtl = std::chrono::milliseconds(20);
}  // namespace

ShmLink::Sender ShmLink::ring_of(uint64_t owner, int fd) noexcept {
  if (auto known = by_owner_[owner].lock()) {
    close(fd);
    return known;
  }
  auto ring = std::make_shared<link::RingSender>(owner, queue_limit_);
  if (ring->attach(fd) != 0) return nullptr;
  by_owner_[owner] = ring;
  return ring;
}

void ShmLink::forget_departed_locked() noexcept {
  if (!inboxes_closed_) return;
  const uint64_t closed = inboxes_closed_->load(std::memory_order_acquire);
  if (closed == inboxes_closed_seen_) return;
  inboxes_closed_seen_ = closed;
  // Which ring was whose is not worth tracking: programs leave seldom,
  // and a live destination costs one resolve to find again.
  routes_.clear();
  groups_.clear();
  by_owner_.clear();
  srq_owners_.clear();
  contexts_.clear();
}

ShmLink::Sender ShmLink::resolve(uint16_t dlid, uint32_t dest_qp) noexcept {
  const uint64_t key = uint64_t{dlid} << 24 | dest_qp;
  auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  forget_departed_locked();
  auto it = routes_.find(key);
  if (it != routes_.end() && (it->second.ring || now < it->second.expires)) return it->second.ring;

  Json reply;
  std::vector<int> fds;
  Route route{nullptr, now + kNegativeTtl};
  if (daemon_->request({{"op", "resolve"}, {"dlid", dlid}, {"qpn", dest_qp}}, &reply, {}, &fds) ==
          0 &&
      reply_ok(reply) && fds.size() == 1) {
    route.ring = ring_of(reply_uint_or(reply, "owner", 0), fds[0]);
  } else {
    for (int fd : fds) close(fd);
  }
  routes_[key] = route;
  return route.ring;
}

// Members join and leave at any time: a group's answer is kept only briefly.
std::vector<ShmLink::Sender> ShmLink::resolve_group(uint16_t mlid) noexcept {
  auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  forget_departed_locked();
  auto it = groups_.find(mlid);
  if (it != groups_.end() && now < it->second.expires) return it->second.rings;
  Json reply;
  std::vector<int> fds;
  Group group{{}, now + kGroupTtl};
  const Json* owners = nullptr;
  if (daemon_->request({{"op", "resolve_mcast"}, {"mlid", mlid}}, &reply, {}, &fds) == 0 &&
      reply_ok(reply) && reply.contains("owners"))
    owners = &reply["owners"];
  for (size_t i = 0; i < fds.size(); ++i) {
    // One ring per member, each named by its owner; anything else is refused.
    const bool named = owners && owners->is_array() && owners->size() == fds.size() &&
                       (*owners)[i].is_number_unsigned();
    if (!named) {
      close(fds[i]);
    } else if (auto ring = ring_of((*owners)[i].get<uint64_t>(), fds[i])) {
      group.rings.push_back(ring);
    }
  }
  groups_[mlid] = group;
  return group.rings;
}

engine::TxResult ShmLink::send(const Sender& ring, const uint8_t* packet, size_t len,
                               link::SlotKind kind) noexcept {
  switch (ring->send(packet, len, kind, engine::now_ns())) {
    case link::RingSender::Result::kSent:
      return engine::TxResult::kSent;
    case link::RingSender::Result::kHeld:
      note_queued(ring);
      return engine::TxResult::kQueued;
    case link::RingSender::Result::kDiscarded:
      break;
  }
  discarded(packet, len, kind, Discard::kReceiverStalled);
  return engine::TxResult::kDiscarded;
}

void ShmLink::note_queued(const Sender& ring) noexcept {
  {
    std::lock_guard lock(queued_mutex_);
    if (std::find(queued_.begin(), queued_.end(), ring) != queued_.end()) return;
    queued_.push_back(ring);
    queuing_.store(queued_.size(), std::memory_order_relaxed);
    if (queued_.size() > 1) return;
  }
  if (on_queued_) on_queued_();
}

void ShmLink::discarded(const uint8_t* packet, size_t len, link::SlotKind kind,
                        Discard why) noexcept {
  if (kind == link::SlotKind::kPacket && on_discard_) on_discard_(packet, len, why);
}

size_t ShmLink::flush_queued(int64_t now_ns) noexcept {
  if (!queuing()) return 0;
  std::unique_lock flushing(flush_mutex_, std::try_to_lock);
  if (!flushing.owns_lock()) return 0;
  std::vector<Sender> rings;
  {
    std::lock_guard lock(queued_mutex_);
    rings = queued_;
  }
  size_t left = 0;
  // A program that left never takes what waits for it: give that up as soon
  // as the daemon says it left, not after the head-of-queue lifetime.
  if (inboxes_closed_) {
    const uint64_t closed = inboxes_closed_->load(std::memory_order_acquire);
    if (closed != queued_closed_seen_) {
      queued_closed_seen_ = closed;
      for (const Sender& ring : rings)
        if (!session_alive(ring->owner()))
          left += ring->discard_held([this](const uint8_t* p, size_t n, link::SlotKind kind) {
            discarded(p, n, kind, Discard::kReceiverGone);
          });
    }
  }
  for (const Sender& ring : rings)
    left += ring->flush(now_ns, [this](const uint8_t* p, size_t n, link::SlotKind kind) {
      discarded(p, n, kind, Discard::kReceiverStalled);
    });
  // A ring is listed while anything waits for it; a sender that queues
  // meanwhile lists it again under this lock (note_queued).
  std::lock_guard lock(queued_mutex_);
  std::erase_if(queued_, [](const Sender& ring) { return !ring->holding(); });
  queuing_.store(queued_.size(), std::memory_order_relaxed);
  return left;
}

engine::TxResult ShmLink::transmit(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet,
                                   size_t len) noexcept {
  if (faults_ && faults_->impaired())
    return faults_->transmit(dlid, dest_qp, packet, len, send_fn());
  return deliver_packet(dlid, dest_qp, packet, len);
}

int64_t ShmLink::release_held(int64_t now_ns) noexcept {
  return faults_ ? faults_->release_due(now_ns, send_fn()) : 0;
}

// What a capture sees is what the wire carries: after the faults.
engine::TxResult ShmLink::deliver_packet(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet,
                                         size_t len) noexcept {
  if (capture_) capture_->maybe_mirror(packet, len);
  if (wire::is_multicast_lid(dlid)) {
    // The emulated switch replicates: one copy into every member process.
    engine::TxResult result = engine::TxResult::kNoRoute;
    for (auto& ring : resolve_group(dlid)) {
      const engine::TxResult r = send(ring, packet, len);
      if (r == engine::TxResult::kSent || result == engine::TxResult::kNoRoute) result = r;
    }
    return result;
  }
  auto ring = resolve(dlid, dest_qp);
  if (!ring) return engine::TxResult::kNoRoute;  // nobody there: the fabric drops it
  return send(ring, packet, len);
}

// --- messages between contexts of this HCA ---

ShmLink::Sender ShmLink::ask(const Json& request, uint64_t* owner) noexcept {
  Json reply;
  std::vector<int> fds;
  if (daemon_->request(request, &reply, {}, &fds) != 0 || !reply_ok(reply) || fds.size() != 1) {
    for (int fd : fds) close(fd);
    return nullptr;
  }
  *owner = reply_uint_or(reply, "owner", 0);
  return ring_of(*owner, fds[0]);
}

bool ShmLink::session_alive(uint64_t session) noexcept {
  Json reply;
  return daemon_->request({{"op", "resolve_session"}, {"session", session}, {"want_fd", false}},
                          &reply) == 0 &&
         reply_ok(reply);
}

engine::Delivery ShmLink::deliver(const Sender& ring, const uint8_t* msg, size_t len) noexcept {
  switch (send(ring, msg, len, link::SlotKind::kMessage)) {
    case engine::TxResult::kSent:
    case engine::TxResult::kQueued:
      return engine::Delivery::kDelivered;
    default:
      return engine::Delivery::kDropped;
  }
}

// SRQ owners are cached until some inbox closes: SRQ numbers are not
// reused soon, and a request for an SRQ its owner destroyed gets that
// owner's refusal.
engine::Delivery ShmLink::to_srq_owner(uint32_t srqn, const uint8_t* msg, size_t len) noexcept {
  Owner owner;
  {
    std::lock_guard lock(mutex_);
    forget_departed_locked();
    auto it = srq_owners_.find(srqn);
    if (it != srq_owners_.end()) {
      owner = it->second;
    } else {
      owner.ring =
          ask({{"op", "resolve_srq"}, {"device", device_}, {"srqn", srqn}}, &owner.session);
      if (!owner.ring) return engine::Delivery::kNoRoute;
      srq_owners_[srqn] = owner;
    }
  }
  return deliver(owner.ring, msg, len);
}

engine::Delivery ShmLink::to_context(uint64_t context, const uint8_t* msg, size_t len) noexcept {
  Sender ring;
  {
    std::lock_guard lock(mutex_);
    forget_departed_locked();
    auto it = contexts_.find(context);
    if (it != contexts_.end()) {
      ring = it->second;
    } else {
      uint64_t owner = 0;
      ring = ask({{"op", "resolve_session"}, {"session", context}}, &owner);
      if (!ring) return engine::Delivery::kNoRoute;
      contexts_[context] = ring;
    }
  }
  return deliver(ring, msg, len);
}

bool ShmLink::srq_owner_alive(uint32_t srqn) noexcept {
  Json reply;
  const bool known =
      daemon_->request(
          {{"op", "resolve_srq"}, {"device", device_}, {"srqn", srqn}, {"want_fd", false}},
          &reply) == 0 &&
      reply_ok(reply);
  std::lock_guard lock(mutex_);
  auto it = srq_owners_.find(srqn);
  if (known && (it == srq_owners_.end() || it->second.session == reply_uint_or(reply, "owner", 0)))
    return true;
  if (it != srq_owners_.end()) srq_owners_.erase(it);
  return false;
}

}  // namespace ibemu::provider
