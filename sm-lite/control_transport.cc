#include "sm-lite/control_transport.h"

namespace ibemu::sm {

std::string mad_to_hex(const MadBytes& mad) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(mad.size() * 2);
  for (uint8_t b : mad) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

std::optional<MadBytes> mad_from_hex(const std::string& hex) {
  if (hex.size() != 512) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  MadBytes out{};
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = uint8_t(hi << 4 | lo);
  }
  return out;
}

std::optional<MadBytes> ControlTransport::send(const MadBytes& mad) {
  if (lost_) return std::nullopt;
  Json req = {{"op", "smp"}, {"device", device_}, {"port", port_}, {"mad", mad_to_hex(mad)}};
  Json reply;
  if (int err = client_.request(req, &reply); err != 0) {
    lost_ = true;
    errno_ = err;
    return std::nullopt;
  }
  if (!reply.is_object() || !reply.value("ok", false)) return std::nullopt;  // dropped
  auto it = reply.find("mad");
  if (it == reply.end() || !it->is_string()) return std::nullopt;
  return mad_from_hex(it->get<std::string>());
}

}  // namespace ibemu::sm
