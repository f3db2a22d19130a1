#pragma once
// `ibemu fault`: what the links of the emulated ports do to packets, and
// link failures.
//   ibemu fault set [-i DEV[:PORT]] [--drop PCT] [--duplicate PCT]
//                   [--reorder PCT] [--delay US] [--jitter US] [--rate MBPS]
//                   [--seed N]
//   ibemu fault clear [-i DEV[:PORT]]
//   ibemu fault link DEV:PORT down|up
//   ibemu fault nak DEV QPN rnr|psn [--count N]
#include <cstdint>
#include <string>

namespace ibemu {

struct FaultOptions {
  std::string action;     // set, clear, link, nak
  std::string interface;  // DEV or DEV:PORT; empty: every port
  double drop = 0, duplicate = 0, reorder = 0;
  unsigned delay_us = 0, jitter_us = 0, rate_mbps = 0;
  uint64_t seed = 1;
  std::string link_state;  // down, up
  std::string qpn;         // nak: decimal or 0x-hex
  std::string nak_kind;    // rnr, psn
  unsigned count = 1;
};

int fault_command(const std::string& runtime_dir, const FaultOptions& o);

}  // namespace ibemu
