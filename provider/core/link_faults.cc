#include "provider/core/link_faults.h"

#include <algorithm>

#include "transport/engine/timing.h"
#include "transport/wire/lrh.h"

namespace ibemu::provider {

namespace {
// A reordered packet waits at most this long for a packet to pass it.
constexpr int64_t kReorderHoldNs = 1'000'000;

// splitmix64: a well-mixed 64-bit value from a counter.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool happens(uint64_t r, uint32_t ppm) { return ppm && r % 1'000'000 < ppm; }
}  // namespace

LinkFaults::Link LinkFaults::sending_link(uint16_t slid) const noexcept {
  if (const int port = page_->port_of_lid(device_, slid)) return {device_, port};
  return {};
}

LinkFaults::Link LinkFaults::receiving_link(uint16_t dlid) const noexcept {
  if (wire::is_multicast_lid(dlid)) return {};
  for (uint32_t d = 0; d < page_->num_devices && d < uint32_t(kMaxDevices); ++d)
    if (const int port = page_->port_of_lid(int(d), dlid)) return {int(d), port};
  return {};
}

uint64_t LinkFaults::draw(const Link& l, const LinkFaultView& f) noexcept {
  const uint64_t k = sequence_[l.device][l.port - 1]++;
  return mix(f.seed ^ (uint64_t(l.device) << 56) ^ (uint64_t(l.port) << 48) ^ mix(k));
}

engine::TxResult LinkFaults::transmit(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet,
                                      size_t len, const Send& send) noexcept {
  if (len < wire::Lrh::kSize) return send(dlid, dest_qp, packet, len);
  const Link out = sending_link(wire::Lrh::from(packet).slid());
  const Link in = receiving_link(dlid);
  const int64_t now = engine::now_ns();
  bool drop = false, duplicate = false, reorder = false;
  const char* why = "injected loss";
  int64_t delay = 0;
  std::unique_lock lock(mutex_);
  const Link crossed[2] = {out, in};
  for (int i = 0; i < 2; ++i) {
    const Link& l = crossed[i];
    if (l.device < 0) continue;
    // A link that is not up carries nothing (its port is not Active).
    if (page_->read_port(l.device, l.port - 1).state != uint8_t(PortState::kActive)) {
      drop = true;
      why = "link down";
      continue;
    }
    const LinkFaultView f = page_->read_faults(l.device, l.port - 1);
    drop |= happens(draw(l, f), f.drop_ppm);
    duplicate |= happens(draw(l, f), f.dup_ppm);
    reorder |= happens(draw(l, f), f.reorder_ppm);
    const uint64_t jitter = draw(l, f);
    delay +=
        int64_t(f.delay_us) * 1000 + (f.jitter_us ? int64_t(jitter % (f.jitter_us + 1)) * 1000 : 0);
    if (i == 0 && f.rate_mbps) {
      // The sending link's bandwidth: each packet occupies it for its length.
      int64_t& busy = busy_until_[l.port - 1];
      busy = std::max(busy, now) + int64_t(len) * 8 * 1000 / f.rate_mbps;
      delay = std::max(delay, busy - now);
    }
  }
  if (drop) {
    if (counters_ && out.device >= 0)
      counters_->at(unsigned(out.port)).fault_drops++;
    else if (count_remote_drop_ && out.device < 0 && in.device >= 0)
      count_remote_drop_(in.device, in.port);
    lock.unlock();
    if (on_drop_) on_drop_(packet, len, why);
    return engine::TxResult::kSent;
  }
  // Packets held behind this one go right after it.
  std::vector<Held> passed;
  passed.swap(behind_next_);
  Held h{now + delay, dlid, dest_qp, std::vector<uint8_t>(packet, packet + len)};
  if (reorder) {
    h.due = now + std::max<int64_t>(delay, kReorderHoldNs);
    behind_next_.push_back(h);
  } else if (delay > 0) {
    held_.push_back(h);
    if (duplicate) held_.push_back(h);
  }
  for (Held& p : passed) {
    p.due = now + delay;
    held_.push_back(std::move(p));
  }
  const bool send_now = !reorder && delay <= 0;
  const bool anything_held = !held_.empty() || !behind_next_.empty();
  lock.unlock();
  if (anything_held && wake_) wake_();  // the progress thread releases them
  if (!send_now) return engine::TxResult::kSent;
  const engine::TxResult result = send(dlid, dest_qp, packet, len);
  if (duplicate) send(dlid, dest_qp, packet, len);
  return result;
}

int64_t LinkFaults::release_due(int64_t now_ns, const Send& send) noexcept {
  std::vector<Held> due;
  int64_t next = 0;
  {
    std::lock_guard lock(mutex_);
    // A reordered packet nothing passed in time goes anyway.
    for (auto it = behind_next_.begin(); it != behind_next_.end();) {
      if (it->due <= now_ns) {
        held_.push_back(std::move(*it));
        it = behind_next_.erase(it);
      } else {
        next = next ? std::min(next, it->due) : it->due;
        ++it;
      }
    }
    std::stable_sort(held_.begin(), held_.end(),
                     [](const Held& a, const Held& b) { return a.due < b.due; });
    auto split =
        std::find_if(held_.begin(), held_.end(), [&](const Held& h) { return h.due > now_ns; });
    due.assign(std::make_move_iterator(held_.begin()), std::make_move_iterator(split));
    held_.erase(held_.begin(), split);
    if (!held_.empty()) next = next ? std::min(next, held_.front().due) : held_.front().due;
  }
  for (const Held& h : due) send(h.dlid, h.dest_qp, h.packet.data(), h.packet.size());
  return next;
}

}  // namespace ibemu::provider
