#include "provider/core/queue_sizing.h"

#include <cerrno>

#include "transport/engine/types.h"

namespace ibemu::provider {

namespace {

constexpr uint32_t kMellanoxOui = 0x02c9;

// The PCI device ids the mlx5 provider claims (Connect-IB, ConnectX-4 to -8
// and their VFs, BlueField 1 to 4); mlx5 reports them as vendor_part_id.
bool is_mlx5_part_id(uint32_t id) {
  if (id >= 0x1011 && id <= 0x101f) return true;
  switch (id) {
    case 0x1021:
    case 0x1023:
    case 0xa2d2:
    case 0xa2d3:
    case 0xa2d6:
    case 0xa2dc:
    case 0xa2df:
      return true;
    default:
      return false;
  }
}

uint32_t round_up_to_power_of_two(uint32_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// mlx5 rings hold a power of two of WQEs, one of which always stays unused
// to tell a full ring from an empty one: 0 WRs is a ring of 1, holding none.
uint32_t mlx5_srq_wr(uint32_t requested) { return round_up_to_power_of_two(requested + 1) - 1; }

// An mlx5 SRQ WQE is a 16-byte next segment plus 16 bytes per SGE, at least
// 32 bytes and rounded up to a power of two; what is left holds the SGEs.
uint32_t mlx5_srq_sge(uint32_t requested) {
  const uint32_t slots = round_up_to_power_of_two(requested + 1);
  return (slots < 2 ? 2 : slots) - 1;
}

}  // namespace

QueueSizing queue_sizing_for(uint32_t vendor_id, uint32_t vendor_part_id) {
  return vendor_id == kMellanoxOui && is_mlx5_part_id(vendor_part_id) ? QueueSizing::kMlx5
                                                                      : QueueSizing::kAsRequested;
}

int size_srq(QueueSizing rules, ibv_srq_attr* attr) {
  if (attr->max_wr > engine::DeviceLimits::kMaxSrqWr ||
      attr->max_sge > engine::DeviceLimits::kMaxSge)
    return EINVAL;
  if (rules == QueueSizing::kMlx5) {
    // The limit is not looked at on creation (ibv_modify_srq arms it), and
    // the rounding never takes a size past the device's own limit.
    auto granted = [](uint32_t rounded, uint32_t limit) {
      return rounded < limit ? rounded : limit;
    };
    attr->max_wr = granted(mlx5_srq_wr(attr->max_wr), engine::DeviceLimits::kMaxSrqWr);
    attr->max_sge = granted(mlx5_srq_sge(attr->max_sge), engine::DeviceLimits::kMaxSge);
    return 0;
  }
  if (attr->max_wr < 1 || attr->max_sge < 1 || attr->srq_limit > attr->max_wr) return EINVAL;
  return 0;
}

}  // namespace ibemu::provider
