// What the user-space rdma_cm (provider/compat/rdmacm) asks of the daemon:
// the ports' addresses, which port of the fabric has an address, and the
// host's rdma_cm port numbers. docs/rdma-cm.md tells the whole story.
#include <fmt/format.h>

#include "common/hex.h"
#include "common/json_integer.h"
#include "common/log.h"
#include "common/mad/cm.h"
#include "emulator-daemon/daemon.h"

namespace ibemu {

std::array<uint8_t, 16> Daemon::port_gid(PortRef port) const {
  std::array<uint8_t, 16> gid{};
  // The prefix the SM set in PortInfo, as sysfs gids/0 shows it: an SM may
  // configure another than the config's.
  const PortAttributes a = subnet_.port(port);
  for (int i = 0; i < 8; ++i) {
    gid[size_t(i)] = uint8_t(a.subnet_prefix >> (56 - 8 * i));
    gid[size_t(8 + i)] = uint8_t(a.port_guid >> (56 - 8 * i));
  }
  return gid;
}

Json Daemon::do_ip_addresses() {
  Json list = Json::array();
  for (const PortAddress& a : ip_addresses_.local()) {
    const PortAttributes attrs = subnet_.port(a.port);
    const auto gid = port_gid(a.port);
    Json entry = {{"device", config_.devices[size_t(a.port.device)].name},
                  {"port", a.port.port},
                  {"ipv4", a.ipv4},
                  {"ipv4_prefix", a.ipv4_prefix},
                  {"gid", to_hex(gid.data(), gid.size())},
                  {"lid", attrs.lid},
                  {"state", port_state_word(attrs.state)}};
    if (!a.ipv6.empty()) {
      entry["ipv6"] = a.ipv6;
      entry["ipv6_prefix"] = a.ipv6_prefix;
    }
    list.push_back(std::move(entry));
  }
  Json reply = {{"ok", true}};
  reply["addresses"] = std::move(list);
  return reply;
}

Json Daemon::do_resolve_ip(const Json& req) {
  const std::string ip = req.at("ip").get<std::string>();
  auto found = ip_addresses_.find(ip, [this](PortRef p) { return port_gid(p); });
  if (!found) return error_reply(EHOSTUNREACH, "no port of the fabric has address " + ip);
  Json reply = {{"ok", true},
                {"gid", to_hex(found->gid.data(), found->gid.size())},
                {"local", found->local_port.has_value()}};
  if (found->local_port) {
    reply["device"] = config_.devices[size_t(found->local_port->device)].name;
    reply["port"] = found->local_port->port;
  }
  return reply;
}

namespace {
constexpr int kFirstUnprivilegedPort = 1024;  // the kernel's PROT_SOCK
}  // namespace

Json Daemon::do_cm_bind(SessionInfo& s, const Json& req, bool bind) {
  const int ps = json_integer<int>(req.at("ps"));
  const std::string ip = IpAddresses::canonical(req.at("ip").get<std::string>());
  const int port = json_integer<int>(req.at("port"));
  if (!CmPortSpace::known_port_space(ps))
    return error_reply(EINVAL, fmt::format("unknown rdma_cm port space {:#x}", ps));
  if (ip.empty() || port < 0 || port > 65535) return error_reply(EINVAL, "bad address or port");
  if (!bind) {
    if (!cm_ports_.unbind(s.id, ps, ip, uint16_t(port)))
      return error_reply(EINVAL, "this session has no such binding");
    return {{"ok", true}};
  }
  // As the kernel's rdma_cm: a port below 1024 needs CAP_NET_BIND_SERVICE,
  // which the daemon can only know of as root's.
  if (port != 0 && port < kFirstUnprivilegedPort && s.uid != 0)
    return error_reply(EACCES, fmt::format("rdma_cm port {} is privileged (below {})", port,
                                           kFirstUnprivilegedPort));
  if (const size_t held = cm_ports_.held_by(s.id); held >= config_.cm_binds_per_session)
    return error_reply(EMFILE, fmt::format("this connection holds {} rdma_cm ports, its limit "
                                           "(config limits.cm_binds_per_session)",
                                           held));
  const uint16_t got = cm_ports_.bind(s.id, ps, ip, uint16_t(port));
  if (!got) return error_reply(EADDRINUSE, fmt::format("rdma_cm port {} is in use", port));
  return {{"ok", true}, {"port", got}};
}

Json Daemon::cm_status() const {
  std::map<SessionId, int> pids;
  for (const SessionInfo& s : server_.sessions()) pids[s.id] = s.pid;
  Json list = Json::array();
  for (const CmPortBinding& b : cm_ports_.bindings()) {
    const auto pid_of = pids.find(b.session);
    const int pid = pid_of == pids.end() ? 0 : pid_of->second;
    // Bound is not yet listening: a REQ between rdma_bind_addr and
    // rdma_listen is rejected, so whoever waits for a server asks this.
    const bool listening = umad_.router().cm_listening(mad::cm::ip_service_id(b.ps, b.port));
    list.push_back(
        {{"ps", b.ps}, {"ip", b.ip}, {"port", b.port}, {"pid", pid}, {"listening", listening}});
  }
  return list;
}

Json Daemon::address_announcement() const {
  Json list = Json::array();
  for (const PortAddress& a : ip_addresses_.local()) {
    const auto gid = port_gid(a.port);
    const std::string hex = to_hex(gid.data(), gid.size());
    list.push_back({{"ip", a.ipv4}, {"gid", hex}});
    if (!a.ipv6.empty()) list.push_back({{"ip", a.ipv6}, {"gid", hex}});
  }
  return list;
}

void Daemon::on_peer_addresses(int uplink, const Json& addresses) {
  std::map<std::string, Gid> table;
  if (addresses.is_array()) {
    for (const Json& a : addresses) {
      if (!a.is_object() || !a.contains("ip") || !a.contains("gid") || !a["ip"].is_string() ||
          !a["gid"].is_string())
        continue;
      std::vector<uint8_t> gid;
      const std::string ip = IpAddresses::canonical(a["ip"].get<std::string>());
      if (ip.empty() || !from_hex(a["gid"].get<std::string>(), &gid) || gid.size() != 16) continue;
      Gid g;
      std::copy(gid.begin(), gid.end(), g.begin());
      table[ip] = g;
    }
  }
  // Both hosts' ports answer for the address, so connections to the other
  // host's go astray: said once, in both hosts' logs.
  for (const IpAddresses::Shared& s :
       ip_addresses_.set_peer(std::to_string(uplink), std::move(table)))
    log_warn(
        "the host behind switch port {} has {} too, as {} port {} here: rdma_cm here resolves "
        "it to the local port; give the hosts fabric bind addresses whose last octets differ, "
        "or each port an ipv4 address of its own (docs/configuration.md)",
        subnet_.uplink_port(uplink), s.ip, config_.devices[s.port.device].name, s.port.port);
}

}  // namespace ibemu
