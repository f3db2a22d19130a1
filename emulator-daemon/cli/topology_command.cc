#include "emulator-daemon/cli/topology_command.h"

#include <fmt/format.h>

#include <iostream>
#include <map>

#include "common/control_channel.h"
#include "common/runtime_paths.h"
#include "emulator-daemon/cli/daemon_session.h"

namespace ibemu {

int topology_command(const std::string& runtime_dir) {
  Json reply;
  if (!query_daemon(runtime_dir, {{"op", "status"}}, &reply) || !reply.value("ok", false)) {
    std::cerr << "ibemu topology: " << unreachable_daemon_message(runtime_dir, reply) << "\n";
    return 1;
  }
  const Json& subnet = reply["subnet"];
  std::map<std::string, const Json*> ca_ports;  // "device/port" -> its entry
  for (const Json& p : subnet["ports"])
    ca_ports[fmt::format("{}/{}", p["device"].get<std::string>(), p["port"].get<int>())] = &p;
  const Json& sw = subnet["switch"];
  std::cout << fmt::format("Switch {} \"{}\" lid {}\n", sw["guid"].get<std::string>(),
                           sw["description"].get<std::string>(), sw["lid"].get<int>());
  // Inter-host ports: the peer daemon's address and its switch.
  std::map<int, const Json*> peers;  // by uplink
  if (reply.contains("fabric") && !reply["fabric"].is_null())
    for (const Json& p : reply["fabric"]["peers"]) peers[p["uplink"].get<int>()] = &p;
  for (const Json& sp : sw["ports"]) {
    if (sp.contains("uplink")) {
      auto it = peers.find(sp["uplink"].get<int>());
      if (it == peers.end()) continue;  // no host on that port yet
      const Json& p = *it->second;
      std::cout << fmt::format("  [{}] -> host {:<21} {:<7} {:<8} switch {}\n",
                               sp["port"].get<int>(), p["address"].get<std::string>(),
                               sp["state"].get<std::string>(), sp["phys_state"].get<std::string>(),
                               p["switch_guid"].get<std::string>());
      continue;
    }
    if (!sp.contains("peer")) continue;  // port 0, the management port
    const std::string peer = sp["peer"].get<std::string>();
    std::cout << fmt::format("  [{}] -> {:<10} {:<7} {:<8}", sp["port"].get<int>(), peer,
                             sp["state"].get<std::string>(), sp["phys_state"].get<std::string>());
    if (auto it = ca_ports.find(peer); it != ca_ports.end()) {
      const Json& p = *it->second;
      std::cout << fmt::format(" port guid {} lid {}{}", p["guid"].get<std::string>(),
                               p["lid"].get<int>(), p["is_sm"].get<bool>() ? " (SM)" : "");
    }
    std::cout << "\n";
  }
  return 0;
}

}  // namespace ibemu
