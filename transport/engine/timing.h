#pragma once
// Transport timers in nanoseconds: the local ACK timeout and the RNR NAK timer.
#include <chrono>
#include <cstdint>

namespace ibemu::engine {

using Nanos = int64_t;

inline Nanos now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Where the engine reads the time. A host gives it the steady clock; unit
/// tests give it one they move by hand, so ACK, RNR and retry timeouts run
/// in virtual time and no test sleeps to see one expire.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual Nanos now() const noexcept = 0;
};

class SteadyClock final : public Clock {
 public:
  Nanos now() const noexcept override { return now_ns(); }
};

inline const Clock& steady_clock() {
  static const SteadyClock clock;
  return clock;
}

/// Local ACK timeout: 4.096 µs × 2^timeout; 0 means infinite (IBA 9.7.6.1.3,
/// C9-141). Returns 0 for "no timer".
inline Nanos local_ack_timeout_ns(uint8_t timeout) {
  if (timeout == 0) return 0;
  if (timeout > 31) timeout = 31;
  return Nanos{4096} << timeout;
}

/// The RNR NAK timer field's meaning (IBA 9.7.5.2.8, table 45), in ns.
inline Nanos rnr_timer_ns(uint8_t code) {
  static constexpr uint32_t kMicros[32] = {
      655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,   320,
      480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240, 15360,
      20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return Nanos{kMicros[code & 31]} * 1000;
}

/// rnr_retry 7 means retry forever (IBA 9.7.5.2.8).
inline constexpr uint8_t kInfiniteRnrRetry = 7;

}  // namespace ibemu::engine
