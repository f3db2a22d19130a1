#pragma once
// How the ibemu command talks to its host's daemon: a control connection
// that has said hello, and one-shot requests over a fresh one.
#include <string>

#include "common/control_channel.h"

namespace ibemu {

/// Connects to the daemon of `runtime_dir` and says hello as `role`; false
/// when no daemon answers.
bool open_daemon_session(ControlClient& client, const std::string& runtime_dir,
                         const std::string& role = "cli");

/// One request on a connection of its own; false when no daemon answered
/// (a reply with "ok": false is an answer).
bool query_daemon(const std::string& runtime_dir, const Json& request, Json* reply);

}  // namespace ibemu
