#pragma once
// How large a queue the HCA grants for what a program asks. The IBA lets an
// HCA grant more than requested (and tells it to report what it granted);
// programs written against ConnectX rely on what the mlx5 provider grants:
// an SRQ asked for 0 WRs or 0 SGEs is created, with every size rounded up
// so that a WQE and the ring are powers of two. ibemu follows those rules
// where it claims to be such a ConnectX, and the IBA's letter elsewhere.
#include <infiniband/verbs.h>

#include <cstdint>

namespace ibemu::provider {

enum class QueueSizing {
  kAsRequested,  // grant exactly what was asked; a queue of 0 is refused
  kMlx5,         // ConnectX-4 and later, as rdma-core's mlx5 provider sizes them
};

/// The rules of an HCA reporting these ids (ibv_device_attr): mlx5's for
/// the part ids the mlx5 provider drives under Mellanox's OUI.
QueueSizing queue_sizing_for(uint32_t vendor_id, uint32_t vendor_part_id);

/// Checks an ibv_create_srq request against the device limits and, where
/// the rules grant more, rewrites attr->max_wr and max_sge to what is
/// granted (mlx5 writes them back; the IBA leaves them unspecified on
/// output). 0, or EINVAL with attr unchanged.
int size_srq(QueueSizing rules, ibv_srq_attr* attr);

}  // namespace ibemu::provider
