#include "provider/core/shm_link.h"

#include <unistd.h>

#include <thread>

#include "transport/wire/lrh.h"

namespace ibemu::provider {

namespace {
// A destination that does not exist yet may be created in a moment (the peer
// is still setting up): forget a negative answer quickly.
constexpr auto kNegativeTtl = std::chrono::milliseconds(20);
// How long a multicast group's member list is reused before asking again.
constexpr auto kGroupTtl = std::chrono::milliseconds(20);
// Rings fill only when the consumer lags; wait a little before dropping.
constexpr int kFullRetries = 2000;
}  // namespace

std::shared_ptr<link::ShmRing> ShmLink::ring_of(uint64_t owner, int fd) noexcept {
  if (auto known = by_owner_[owner].lock()) {
    close(fd);
    return known;
  }
  auto ring = std::make_shared<link::ShmRing>();
  if (ring->attach(fd) != 0) {
    close(fd);
    return nullptr;
  }
  by_owner_[owner] = ring;
  return ring;
}

std::shared_ptr<link::ShmRing> ShmLink::resolve(uint16_t dlid, uint32_t dest_qp) noexcept {
  const uint64_t key = uint64_t{dlid} << 24 | dest_qp;
  auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  auto it = routes_.find(key);
  if (it != routes_.end() && (it->second.ring || now < it->second.expires)) return it->second.ring;

  Json reply;
  std::vector<int> fds;
  Route route{nullptr, now + kNegativeTtl};
  if (daemon_->request({{"op", "resolve"}, {"dlid", dlid}, {"qpn", dest_qp}}, &reply, {}, &fds) ==
          0 &&
      reply.value("ok", false) && fds.size() == 1) {
    route.ring = ring_of(reply.value("owner", uint64_t{0}), fds[0]);
  } else {
    for (int fd : fds) close(fd);
  }
  routes_[key] = route;
  return route.ring;
}

// Members join and leave at any time: a group's answer is kept only briefly.
std::vector<std::shared_ptr<link::ShmRing>> ShmLink::resolve_group(uint16_t mlid) noexcept {
  auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  auto it = groups_.find(mlid);
  if (it != groups_.end() && now < it->second.expires) return it->second.rings;
  Json reply;
  std::vector<int> fds;
  Group group{{}, now + kGroupTtl};
  if (daemon_->request({{"op", "resolve_mcast"}, {"mlid", mlid}}, &reply, {}, &fds) == 0 &&
      reply.value("ok", false) && reply["owners"].size() == fds.size()) {
    for (size_t i = 0; i < fds.size(); ++i)
      if (auto ring = ring_of(reply["owners"][i].get<uint64_t>(), fds[i]))
        group.rings.push_back(ring);
  } else {
    for (int fd : fds) close(fd);
  }
  groups_[mlid] = group;
  return group.rings;
}

bool ShmLink::push(link::ShmRing& ring, const uint8_t* packet, size_t len) noexcept {
  for (int i = 0; i < kFullRetries; ++i) {
    if (ring.push(packet, len)) return true;
    std::this_thread::yield();
  }
  return false;
}

bool ShmLink::transmit(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet,
                       size_t len) noexcept {
  if (wire::is_multicast_lid(dlid)) {
    // The emulated switch replicates: one copy into every member process.
    bool delivered = false;
    for (auto& ring : resolve_group(dlid)) delivered |= push(*ring, packet, len);
    return delivered;
  }
  auto ring = resolve(dlid, dest_qp);
  if (!ring) return false;  // nobody there: the fabric drops it
  return push(*ring, packet, len);
}

}  // namespace ibemu::provider
