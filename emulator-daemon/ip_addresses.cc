#include "emulator-daemon/ip_addresses.h"

#include <arpa/inet.h>

namespace ibemu {

namespace {

/// "address/len" (as the config normalizes it) into its two parts.
void split(const std::string& text, std::string* ip, int* prefix) {
  const size_t slash = text.find('/');
  *ip = text.substr(0, slash);
  *prefix = slash == std::string::npos ? 0 : std::stoi(text.substr(slash + 1));
}

}  // namespace

IpAddresses::IpAddresses(const Config& config) {
  for (size_t d = 0; d < config.devices.size(); ++d) {
    const DeviceConfig& dev = config.devices[d];
    for (int p = 1; p <= dev.ports; ++p) {
      PortAddress a;
      a.port = {int(d), p};
      if (size_t(p) <= dev.ipv4.size()) split(dev.ipv4[p - 1], &a.ipv4, &a.ipv4_prefix);
      if (size_t(p) <= dev.ipv6.size()) split(dev.ipv6[p - 1], &a.ipv6, &a.ipv6_prefix);
      local_.push_back(a);
    }
  }
}

std::vector<IpAddresses::Shared> IpAddresses::set_peer(const std::string& peer,
                                                       std::map<std::string, Gid> table) {
  // A host announces its table in every hello: a shared address is told
  // once, and again only after the peer stopped announcing it.
  std::set<std::string> shared;
  std::vector<Shared> fresh;
  const std::set<std::string>& told = conflicts_[peer];
  for (const PortAddress& a : local_) {
    for (const std::string* ip : {&a.ipv4, &a.ipv6}) {
      if (ip->empty() || !table.count(*ip)) continue;
      shared.insert(*ip);
      if (!told.count(*ip)) fresh.push_back({a.port, *ip});
    }
  }
  if (shared.empty())
    conflicts_.erase(peer);
  else
    conflicts_[peer] = std::move(shared);
  if (table.empty())
    peers_.erase(peer);
  else
    peers_[peer] = std::move(table);
  return fresh;
}

std::string IpAddresses::canonical(const std::string& ip) {
  unsigned char buf[16];
  char out[INET6_ADDRSTRLEN];
  for (int family : {AF_INET, AF_INET6})
    if (inet_pton(family, ip.c_str(), buf) == 1 && inet_ntop(family, buf, out, sizeof out))
      return out;
  return "";
}

}  // namespace ibemu
