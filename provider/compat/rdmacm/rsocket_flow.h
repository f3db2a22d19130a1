#pragma once
// The stream's flow control, apart from any verbs: the receive ring the
// peer writes into, the window the writer may use in the peer's ring, the
// credits still to be reported, and the staging ring that sends copy into.
// Positions are running 64-bit byte counts; a ring position is count % size.
// Header-only so that tests/unit can check it without a device.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ibemu::rsock {

/// Where one write goes: `offset` into a ring, `length` bytes, never past
/// the ring's end.
struct Extent {
  size_t offset = 0;
  size_t length = 0;
};

/// Bytes the peer wrote into our ring, and how far the program has read.
class ReceiveRing {
 public:
  void reset(size_t size) {
    size_ = size;
    received_ = consumed_ = 0;
  }
  size_t size() const { return size_; }
  uint64_t consumed() const { return consumed_; }
  size_t readable() const { return size_t(received_ - consumed_); }

  /// A stream write of `length` bytes landed at the running position.
  /// False when the peer overran the room it was given: a protocol error.
  bool on_write(uint32_t length) {
    if (readable() + length > size_) return false;
    received_ += length;
    return true;
  }

  /// Copies up to `length` bytes that start `skip` bytes past the read
  /// position; returns how many.
  size_t copy_out(const uint8_t* ring, uint8_t* out, size_t length, size_t skip = 0) const {
    if (skip >= readable()) return 0;
    const size_t n = std::min(length, readable() - skip);
    const size_t pos = size_t((consumed_ + skip) % size_);
    const size_t first = std::min(n, size_ - pos);
    std::memcpy(out, ring + pos, first);
    std::memcpy(out + first, ring, n - first);
    return n;
  }

  void consume(size_t n) { consumed_ += std::min(n, readable()); }

 private:
  size_t size_ = 0;
  uint64_t received_ = 0, consumed_ = 0;
};

/// The writer's view of the peer's ring and receive WRs.
class SendWindow {
 public:
  void reset(size_t peer_ring_size, uint64_t peer_data_credits) {
    ring_size_ = peer_ring_size;
    initial_credits_ = peer_data_credits;
    written_ = peer_consumed_ = 0;
    messages_ = peer_reposted_ = 0;
  }

  /// Room in the peer's ring, whether or not it is contiguous.
  size_t room() const { return ring_size_ ? ring_size_ - size_t(written_ - peer_consumed_) : 0; }
  /// Receive WRs of the peer that stream writes may still consume.
  uint64_t message_credits() const { return initial_credits_ + peer_reposted_ - messages_; }
  /// Everything written has been read by the peer's program.
  bool drained() const { return written_ == peer_consumed_; }

  /// The next write of at most `want` bytes; length 0 when out of credits.
  Extent next(size_t want) const {
    if (!message_credits() || !room()) return {};
    const size_t pos = size_t(written_ % ring_size_);
    return {pos, std::min({want, room(), ring_size_ - pos})};
  }
  void commit(size_t length) {
    written_ += length;
    ++messages_;
  }

  /// The peer's credit totals; stale (reordered or repeated) ones change nothing.
  void on_credits(uint64_t consumed, uint64_t reposted) {
    if (consumed > peer_consumed_ && consumed <= written_) peer_consumed_ = consumed;
    if (reposted > peer_reposted_ && reposted <= messages_) peer_reposted_ = reposted;
  }

 private:
  size_t ring_size_ = 0;
  uint64_t initial_credits_ = 0;
  uint64_t written_ = 0, peer_consumed_ = 0;
  uint64_t messages_ = 0, peer_reposted_ = 0;
};

/// What this side owes the peer: ring bytes read and receive WRs posted
/// again since the last report.
class CreditReport {
 public:
  void reset() { consumed_ = reposted_ = reported_consumed_ = reported_reposted_ = 0; }
  void set_consumed(uint64_t consumed) { consumed_ = consumed; }
  void on_repost() { ++reposted_; }
  uint64_t consumed() const { return consumed_; }
  uint64_t reposted() const { return reposted_; }
  bool owed() const { return consumed_ != reported_consumed_ || reposted_ != reported_reposted_; }

  /// Worth a message of its own: half the ring or half the receive WRs.
  /// Smaller debts ride on other control messages or wait for a sleep.
  bool due(size_t ring_size, uint64_t data_credits) const {
    return consumed_ - reported_consumed_ >= ring_size / 2 ||
           reposted_ - reported_reposted_ >= std::max<uint64_t>(1, data_credits / 2);
  }
  void reported() {
    reported_consumed_ = consumed_;
    reported_reposted_ = reposted_;
  }

 private:
  uint64_t consumed_ = 0, reposted_ = 0;
  uint64_t reported_consumed_ = 0, reported_reposted_ = 0;
};

/// The registered buffer sends copy into until their WRs complete. WRs
/// complete in the order they were posted, so it is released in order too.
class StagingRing {
 public:
  void reset(size_t size) {
    size_ = size;
    head_ = tail_ = 0;
  }
  size_t size() const { return size_; }
  bool empty() const { return head_ == tail_; }

  /// Up to `want` contiguous free bytes; length 0 when full.
  Extent reserve(size_t want) const {
    const size_t free = size_ - size_t(head_ - tail_);
    const size_t pos = size_t(head_ % size_);
    return {pos, std::min({want, free, size_ - pos})};
  }
  void commit(size_t length) { head_ += length; }
  void release(size_t length) { tail_ += std::min<uint64_t>(length, head_ - tail_); }

 private:
  size_t size_ = 0;
  uint64_t head_ = 0, tail_ = 0;
};

}  // namespace ibemu::rsock
