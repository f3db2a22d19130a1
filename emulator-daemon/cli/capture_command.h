#pragma once
// `ibemu capture`: asks the daemon to write the packets crossing the host's
// ports (or some of them) to a pcap file, until Ctrl-C, a packet count or a
// duration; or, given a command, while that command runs, started only once
// the capture is active so that its first packet is in the file.
#include <cstdint>
#include <string>
#include <vector>

namespace ibemu {

struct CaptureOptions {
  std::string file;
  std::string interface;  // "DEVICE" or "DEVICE:PORT"; empty: every port
  std::string qpn;        // decimal or 0x-hex; empty: any
  int lid = -1;
  uint64_t count = 0;
  double duration = 0;
  double file_megabytes = 0;  // ring of files when non-zero
  unsigned files = 1;
  std::string linktype = "erf";
  std::vector<std::string> command;  // after "--": run it, capture while it runs
};

/// 0, 1 when the capture cannot start, or the exit status of the command.
int capture_command(const std::string& runtime_dir, const CaptureOptions& o);

}  // namespace ibemu
