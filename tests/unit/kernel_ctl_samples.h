#pragma once
// Well-formed messages of each kind the daemon writes to /dev/ibemu: the
// validator's unit test starts from them, and so does its fuzz target's corpus.
#include <cstring>

#include "emulator-daemon/kernel_messages.h"

namespace ibemu::testing {

inline ibemu_ctl_add_device valid_device() {
  auto m = kernel_message<ibemu_ctl_add_device>(IBEMU_CTL_ADD_DEVICE);
  m.abi_version = IBEMU_CTL_ABI_VERSION;
  m.num_ports = 2;
  std::strcpy(m.name, "ibemu0");
  std::strcpy(m.node_desc, "host ibemu0");
  m.max_cqe = 1024;
  m.max_sge = 16;
  m.kernel_qpn_first = 0xf00000;
  m.kernel_qpn_count = 0xfffff;
  return m;
}

inline ibemu_ctl_set_port valid_port() {
  auto m = kernel_message<ibemu_ctl_set_port>(IBEMU_CTL_SET_PORT);
  m.port = 1;
  m.state = 4;
  m.phys_state = 5;
  m.max_mtu = 5;
  m.active_mtu = 5;
  return m;
}

inline ibemu_ctl_mad_in valid_mad_in() {
  auto m = kernel_message<ibemu_ctl_mad_in>(IBEMU_CTL_MAD_IN);
  m.port = 1;
  return m;
}

inline ibemu_ctl_process_mad_reply valid_mad_reply() {
  auto m = kernel_message<ibemu_ctl_process_mad_reply>(IBEMU_CTL_PROCESS_MAD_REPLY);
  m.hdr.seq = 7;
  m.result = IBEMU_CTL_MAD_REPLY;
  return m;
}

}  // namespace ibemu::testing
