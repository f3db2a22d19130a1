#pragma once
// The IPoIB-style addresses of the emulated ports, for rdma_cm: this host's
// from the config, other hosts' as their daemons announce them in the
// fabric's hellos. Maps an address to the GID of the port that has it, as
// IPoIB's ARP would on a real subnet.
#include <array>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/config.h"
#include "emulator-daemon/subnet.h"

namespace ibemu {

using Gid = std::array<uint8_t, 16>;

struct PortAddress {
  PortRef port;
  std::string ipv4;  // "a.b.c.d", no prefix length
  int ipv4_prefix = 0;
  std::string ipv6;  // empty when the port has none
  int ipv6_prefix = 0;
};

class IpAddresses {
 public:
  /// This host's ports' addresses, in config order.
  explicit IpAddresses(const Config& config);

  const std::vector<PortAddress>& local() const { return local_; }

  /// What another host announced: address text → GID. Replaces what it
  /// said before; an empty table forgets it. Returns the addresses it
  /// announces that a port of this host has too, each once: while both
  /// keep it, rdma_cm here finds the local port and the other host cannot
  /// be reached at that address (IPoIB's ARP would answer twice).
  struct Shared {
    PortRef port;    // this host's port
    std::string ip;  // canonical text
  };
  std::vector<Shared> set_peer(const std::string& peer, std::map<std::string, Gid> table);

  struct Found {
    Gid gid{};
    std::optional<PortRef> local_port;  // set when the port is this host's
  };
  /// The port that has `ip` (any textual form of an IPv4 or IPv6 address),
  /// here or on a live peer; nullopt when nobody has it. `gid_of` gives a
  /// local port's GID.
  template <typename GidOf>
  std::optional<Found> find(const std::string& ip, GidOf gid_of) const {
    const std::string key = canonical(ip);
    if (key.empty()) return std::nullopt;
    for (const PortAddress& a : local_)
      if (a.ipv4 == key || a.ipv6 == key) return Found{gid_of(a.port), a.port};
    for (const auto& [peer, table] : peers_)
      if (auto it = table.find(key); it != table.end()) return Found{it->second, std::nullopt};
    return std::nullopt;
  }

  /// The address text inet_ntop gives, or "" when `ip` is none.
  static std::string canonical(const std::string& ip);

 private:
  std::vector<PortAddress> local_;
  std::map<std::string, std::map<std::string, Gid>> peers_;
  /// Per peer, the shared addresses already returned by set_peer.
  std::map<std::string, std::set<std::string>> conflicts_;
};

}  // namespace ibemu
