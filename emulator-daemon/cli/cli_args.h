#pragma once
// Arguments several ibemu commands take, checked strictly: a mistyped value
// is refused with a message naming it, never passed on as NaN, clipped to
// the type's range or cut at the first character that does not fit.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

namespace ibemu {

/// `-i DEVICE[:PORT]`.
struct InterfaceArg {
  std::string device;
  std::optional<int> port;  // 1..255; none: every port of the device
};

/// Empty when `text` is DEVICE or DEVICE:PORT, else what is wrong with it.
std::string parse_interface(const std::string& text, InterfaceArg* out);

/// Empty when `text` is a QP number (decimal or 0x-hex, at most 24 bits as
/// in the BTH), else what is wrong with it.
std::string parse_qpn(const std::string& text, uint32_t* qpn);

/// CLI11 checks of the same, for options and positionals.
CLI::Validator interface_check();
CLI::Validator qpn_check();
/// A percentage: a number from 0 to 100 (not NaN).
CLI::Validator percent_check();
/// A whole number from 0 to `max`, decimal or 0x: no sign, nothing clipped
/// to the option's type.
CLI::Validator whole_number_check(uint64_t max);

}  // namespace ibemu
