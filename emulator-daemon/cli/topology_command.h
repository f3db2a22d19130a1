#pragma once
// `ibemu topology`: the subnet as cables and switches, in the spirit of
// ibnetdiscover: each switch, its ports, what each is cabled to, with the
// link state and the LIDs the subnet manager gave out.
#include <string>

namespace ibemu {

int topology_command(const std::string& runtime_dir);

}  // namespace ibemu
