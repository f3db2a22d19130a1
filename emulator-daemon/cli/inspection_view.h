#pragma once
// The human view of what `status` with "details" says about verbs programs:
// each process's contexts with their QPs (state, PSNs, peer, queues), CQs and
// memory regions, as compact tables. `ibemu status` and `ibemu top` print it.
#include <ostream>
#include <string>

#include "common/control_channel.h"

namespace ibemu {

/// Every verbs program of a status reply, with its contexts' objects.
void print_processes(std::ostream& out, const Json& status);

/// "RTS 2  ERR 1": how many QPs of a process are in each state.
std::string qp_state_counts(const Json& process);

}  // namespace ibemu
