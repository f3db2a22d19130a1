#pragma once
// Helpers shared by the subnet and SM tests: a fixed config and SMP builders.
#include <optional>
#include <vector>

#include "common/config.h"
#include "common/mad/smp.h"
#include "common/mad/smp_attributes.h"
#include "emulator-daemon/subnet.h"

namespace ibemu::testing {

/// Two devices with two ports each (switch ports 1..4 = ibemu0/1, ibemu0/2,
/// ibemu1/1, ibemu1/2), fixed GUIDs.
inline Config two_by_two() {
  return Config::parse(R"({"host_id": 4660, "devices": [
      {"name": "ibemu0", "node_guid": "0x0002c90300000100", "ports": 2},
      {"name": "ibemu1", "node_guid": "0x0002c90300000200", "ports": 2}]})");
}

inline mad::Smp dr_get(mad::AttrId attr, uint32_t mod, std::vector<uint8_t> path,
                       uint64_t tid = 1) {
  return mad::Smp::make_directed(mad::Method::kGet, attr, mod, tid, path.data(), path.size());
}

template <typename A>
mad::Smp dr_set(mad::AttrId attr, uint32_t mod, std::vector<uint8_t> path, const A& value,
                uint64_t tid = 2) {
  mad::Smp s = mad::Smp::make_directed(mad::Method::kSet, attr, mod, tid, path.data(), path.size());
  s.set_attr(value);
  return s;
}

inline std::optional<mad::Smp> send(Subnet& subnet, PortRef from, const mad::Smp& req,
                                    uint16_t dlid = 0xffff) {
  auto r = subnet.process_smp(from, req.bytes.data(), req.bytes.size(), dlid);
  if (!r) return std::nullopt;
  return mad::Smp::from_bytes(r->data(), r->size());
}

}  // namespace ibemu::testing
