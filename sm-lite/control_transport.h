#pragma once
// SMPs through ibemud's control socket: {"op":"smp","device":D,"port":P,
// "mad":"<512 hex digits>"} answered by {"ok":true,"mad":"..."} or by
// {"ok":false,...} when the SMP was dropped.
#include <string>

#include "common/control_channel.h"
#include "sm-lite/smp_transport.h"

namespace ibemu::sm {

/// Lower-case hex of a MAD, and back (nullopt unless exactly 512 hex digits).
std::string mad_to_hex(const MadBytes& mad);
std::optional<MadBytes> mad_from_hex(const std::string& hex);

class ControlTransport : public SmpTransport {
 public:
  ControlTransport(ControlClient& client, int device, int port)
      : client_(client), device_(device), port_(port) {}
  std::optional<MadBytes> send(const MadBytes& mad) override;
  /// Set once the daemon stopped answering at all (not a dropped SMP).
  bool lost() const { return lost_; }
  int last_errno() const { return errno_; }

 private:
  ControlClient& client_;
  int device_;
  int port_;
  bool lost_ = false;
  int errno_ = 0;
};

}  // namespace ibemu::sm
