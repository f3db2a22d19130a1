#pragma once
// How the ibemu command talks to its host's daemon: a control connection
// that has said hello, and one-shot requests over a fresh one.
#include <string>

#include "common/control_channel.h"

namespace ibemu {

/// Connects to the daemon of `runtime_dir` and says hello as `role`; false
/// when no daemon answers, or when it refused the connection (too many
/// connections): then *refusal, if given, is its reply.
bool open_daemon_session(ControlClient& client, const std::string& runtime_dir,
                         const std::string& role = "cli", Json* refusal = nullptr);

/// One request on a connection of its own; false when no daemon answered
/// or it refused the connection, *reply then holding the refusal if any (a
/// reply with "ok": false to the request itself is an answer).
bool query_daemon(const std::string& runtime_dir, const Json& request, Json* reply);

/// What to tell the user when query_daemon returned false with `reply`:
/// the daemon's refusal, or that no daemon runs (or the socket is not theirs).
std::string unreachable_daemon_message(const std::string& runtime_dir, const Json& reply);

}  // namespace ibemu
