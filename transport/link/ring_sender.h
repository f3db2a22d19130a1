#pragma once
// The sending side of one inbox ring, as a port's output queue is on a real
// link. IBA's link layer is lossless (IBA 7.9): a sender without credits
// keeps its packet until the receiver has room. So a packet that finds the
// ring full waits here, behind any that already wait, and goes in when the
// consumer has taken some; nobody waits for room while holding anything.
//
// A receiver that takes nothing for the head-of-queue lifetime (IBA
// 18.2.5.4, HOQLife: its program stopped, hangs, or died with a full
// ring) loses what waits for it: those packets are discarded and counted,
// as a switch discards them. Its RC peers recover them by retransmission.
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

#include "transport/link/shm_ring.h"

namespace ibemu::link {

class RingSender {
 public:
  enum class Result { kSent, kHeld, kDiscarded };
  /// Called for each packet given up, outside any lock of the sender.
  using OnDiscard = std::function<void(const uint8_t* data, size_t len, SlotKind kind)>;

  static constexpr int64_t kHoqLifetimeNs = 1'000'000'000;
  /// What may wait for one ring by default. The transport holds a sender
  /// back long before this (a QP stops sending once its packet waits); the
  /// bound is for senders that nothing holds back.
  static constexpr size_t kMaxHeldBytes = 64u << 20;

  /// `owner`: whose ring it is (the daemon's session), for those who ask;
  /// `max_held`: the bytes that may wait, beyond which a packet is discarded.
  explicit RingSender(uint64_t owner, size_t max_held = kMaxHeldBytes)
      : owner_(owner), max_held_(max_held) {}
  /// Maps the ring (ShmRing::attach); takes `fd` in any case.
  int attach(int fd) noexcept;
  uint64_t owner() const { return owner_; }

  /// Sends one packet now, or keeps it until there is room.
  Result send(const uint8_t* data, size_t len, SlotKind kind, int64_t now_ns) noexcept;
  /// Moves waiting packets into the ring while it has room; discards them
  /// all once the receiver took nothing for kHoqLifetimeNs. Returns how
  /// many packets left (sent or discarded).
  size_t flush(int64_t now_ns, const OnDiscard& on_discard) noexcept;
  /// Discards everything waiting (the receiver is gone).
  size_t discard_held(const OnDiscard& on_discard) noexcept;
  bool holding() const noexcept;

 private:
  struct Held {
    std::vector<uint8_t> bytes;
    SlotKind kind;
  };
  std::deque<Held> take_all_locked() noexcept;

  const uint64_t owner_;
  const size_t max_held_;
  ShmRing ring_;
  mutable std::mutex mutex_;
  std::deque<Held> held_;
  size_t held_bytes_ = 0;
  uint64_t consumed_seen_ = 0;  // the receiver's progress when last looked at ...
  int64_t progress_at_ns_ = 0;  // ... and when it last changed
};

}  // namespace ibemu::link
