#include "emulator-daemon/cli/daemon_session.h"

#include <unistd.h>

#include "common/runtime_paths.h"

namespace ibemu {

bool open_daemon_session(ControlClient& client, const std::string& runtime_dir,
                         const std::string& role) {
  Json reply;
  return client.connect(RuntimePaths{runtime_dir}.socket()) == 0 &&
         client.request({{"op", "hello"}, {"role", role}, {"pid", getpid()}}, &reply) == 0;
}

bool query_daemon(const std::string& runtime_dir, const Json& request, Json* reply) {
  ControlClient client;
  return open_daemon_session(client, runtime_dir) && client.request(request, reply) == 0;
}

}  // namespace ibemu
