#include "emulator-daemon/cli/daemon_session.h"

#include <unistd.h>

#include "common/runtime_paths.h"

namespace ibemu {

bool open_daemon_session(ControlClient& client, const std::string& runtime_dir,
                         const std::string& role, Json* refusal) {
  Json reply;
  if (client.connect(RuntimePaths{runtime_dir}.socket()) != 0 ||
      client.request({{"op", "hello"}, {"role", role}, {"pid", getpid()}}, &reply) != 0)
    return false;
  if (reply_ok(reply)) return true;
  if (refusal) *refusal = reply;
  return false;
}

bool query_daemon(const std::string& runtime_dir, const Json& request, Json* reply) {
  ControlClient client;
  *reply = Json::object();
  return open_daemon_session(client, runtime_dir, "cli", reply) &&
         client.request(request, reply) == 0;
}

std::string unreachable_daemon_message(const std::string& runtime_dir, const Json& reply) {
  if (reply.is_object() && reply.contains("error") && reply["error"].is_string())
    return "ibemud refused the connection: " + reply["error"].get<std::string>();
  return daemon_not_running_message(RuntimePaths{runtime_dir}.socket());
}

}  // namespace ibemu
