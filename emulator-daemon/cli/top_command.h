#pragma once
// `ibemu top`: the host's ports and verbs programs, refreshed in place —
// packet and byte rates and drops per port, QPs per process by state.
#include <string>

namespace ibemu {

struct TopOptions {
  double interval = 1.0;  // seconds between frames
  int count = 0;          // frames to show; 0: until interrupted
};

int top_command(const std::string& runtime_dir, const TopOptions& options);

}  // namespace ibemu
