#include "provider/core/shm_link.h"

#include <unistd.h>

#include <thread>

namespace ibemu::provider {

namespace {
// A destination that does not exist yet may be created in a moment (the peer
// is still setting up): forget a negative answer quickly.
constexpr auto kNegativeTtl = std::chrono::milliseconds(20);
// Rings fill only when the consumer lags; wait a little before dropping.
constexpr int kFullRetries = 2000;
}  // namespace

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
    uint64_t owner = reply.value("owner", uint64_t{0});
    auto known = by_owner_[owner].lock();
    if (known) {
      close(fds[0]);
      route.ring = known;
    } else {
      auto ring = std::make_shared<link::ShmRing>();
      if (ring->attach(fds[0]) == 0) {
        route.ring = ring;
        by_owner_[owner] = ring;
      } else {
        close(fds[0]);
      }
    }
  } else {
    for (int fd : fds) close(fd);
  }
  routes_[key] = route;
  return route.ring;
}

bool ShmLink::transmit(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet,
                       size_t len) noexcept {
  auto ring = resolve(dlid, dest_qp);
  if (!ring) return false;  // nobody there: the fabric drops it
  for (int i = 0; i < kFullRetries; ++i) {
    if (ring->push(packet, len)) return true;
    std::this_thread::yield();
  }
  return false;
}

}  // namespace ibemu::provider
