// 24-bit packet sequence number arithmetic (IBA 9.7).
//
// PSNs wrap modulo 2^24. The spec splits the PSN space around the expected
// PSN into a valid half and an invalid/duplicate half (IBA 9.7), so
// ordering is only meaningful for PSNs less than 2^23 apart. Every PSN
// comparison in ibemu goes through this file; nothing else masks PSNs.
#pragma once

#include <cstdint>

namespace ibemu::wire {

inline constexpr uint32_t kPsnMask = 0xffffff;
inline constexpr uint32_t kPsnHalf = 0x800000;  // 2^23

/// `psn + n` modulo 2^24.
inline constexpr uint32_t psn_add(uint32_t psn, uint32_t n) noexcept {
  return (psn + n) & kPsnMask;
}

/// Signed distance `a - b` in (-2^23, 2^23]; a distance of exactly 2^23 is
/// ambiguous on the wire and is reported as positive.
inline constexpr int32_t psn_diff(uint32_t a, uint32_t b) noexcept {
  const uint32_t d = (a - b) & kPsnMask;
  return d > kPsnHalf ? static_cast<int32_t>(d) - static_cast<int32_t>(kPsnMask + 1)
                      : static_cast<int32_t>(d);
}

/// True when `a` comes before `b` in PSN order.
inline constexpr bool psn_before(uint32_t a, uint32_t b) noexcept { return psn_diff(a, b) < 0; }

/// True when `a` equals `b` or comes after it.
inline constexpr bool psn_at_or_after(uint32_t a, uint32_t b) noexcept {
  return psn_diff(a, b) >= 0;
}

}  // namespace ibemu::wire
