#include "emulator-daemon/cli/cli_args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace ibemu {

namespace {

// The whole of `text` as an unsigned number in `base` (0: decimal or 0x),
// or nothing: no sign, no trailing characters, no overflow.
std::optional<unsigned long long> whole_number(const std::string& text, int base) {
  if (text.empty() || !std::isxdigit(static_cast<unsigned char>(text[0]))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, base);
  if (errno == ERANGE || *end != '\0') return std::nullopt;
  return v;
}

// A CLI11 check from a function that returns what is wrong (empty: nothing).
CLI::Validator check_of(std::string description, std::string (*what_is_wrong)(const std::string&)) {
  return CLI::Validator([what_is_wrong](std::string& text) { return what_is_wrong(text); },
                        std::move(description));
}

}  // namespace

std::string parse_interface(const std::string& text, InterfaceArg* out) {
  const auto colon = text.find(':');
  InterfaceArg a;
  a.device = text.substr(0, colon);
  if (a.device.empty()) return "'" + text + "' names no device (DEVICE or DEVICE:PORT)";
  if (colon != std::string::npos) {
    const auto port = whole_number(text.substr(colon + 1), 10);
    if (!port || *port < 1 || *port > 255)
      return "'" + text + "': the port after ':' must be a number from 1 to 255";
    a.port = static_cast<int>(*port);
  }
  *out = a;
  return {};
}

std::string parse_qpn(const std::string& text, uint32_t* qpn) {
  const auto v = whole_number(text, 0);
  if (!v || *v > 0xffffff) return "'" + text + "' is not a QP number (decimal or 0x..., 24 bits)";
  *qpn = static_cast<uint32_t>(*v);
  return {};
}

CLI::Validator interface_check() {
  return check_of("DEVICE[:PORT]", [](const std::string& text) {
    InterfaceArg a;
    return parse_interface(text, &a);
  });
}

CLI::Validator qpn_check() {
  return check_of("QPN", [](const std::string& text) {
    uint32_t qpn;
    return parse_qpn(text, &qpn);
  });
}

CLI::Validator percent_check() {
  return check_of("PERCENT", [](const std::string& text) -> std::string {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    // !(v >= 0 && v <= 100) is true for NaN as well.
    if (text.empty() || *end != '\0' || !(v >= 0 && v <= 100))
      return "'" + text + "' is not a percentage from 0 to 100";
    return {};
  });
}

CLI::Validator whole_number_check(uint64_t max) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        const bool digits = !text.empty() && std::isdigit(static_cast<unsigned char>(text[0]));
        const auto v = digits ? whole_number(text, 0) : std::nullopt;
        if (!v || *v > max)
          return "'" + text + "' is not a whole number from 0 to " + std::to_string(max) +
                 " (decimal or 0x...)";
        return {};
      },
      "N");
}

}  // namespace ibemu
