#include "sm-lite/control_transport.h"

#include <algorithm>
#include <vector>

#include "common/hex.h"

namespace ibemu::sm {

std::string mad_to_hex(const MadBytes& mad) { return to_hex(mad.data(), mad.size()); }

std::optional<MadBytes> mad_from_hex(const std::string& hex) {
  std::vector<uint8_t> bytes;
  MadBytes out{};
  if (!from_hex(hex, &bytes) || bytes.size() != out.size()) return std::nullopt;
  std::copy(bytes.begin(), bytes.end(), out.begin());
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
