// Telling systemd that ibemud is ready (Type=notify units), without
// linking libsystemd: the protocol is one datagram on $NOTIFY_SOCKET.
#pragma once

namespace ibemu {

/// Sends "READY=1" to the service manager named by $NOTIFY_SOCKET, once the
/// control socket listens, so that units ordered after ibemud.service (the
/// SM) find a daemon that answers. Returns false, and does nothing, when no
/// service manager asked (the variable is unset: `ibemu up`, a terminal) or
/// when the datagram could not be sent; readiness is best effort, as in
/// sd_notify(3), and never stops the daemon.
bool notify_service_manager_ready() noexcept;

}  // namespace ibemu
