#include "emulator-daemon/datagram_auth.h"

#include <openssl/evp.h>

#include <cstring>
#include <ctime>

#include "emulator-daemon/fabric_datagram.h"

namespace ibemu::fabric {

namespace {
constexpr size_t kFlagByte = 6;
constexpr uint64_t kWindow = 64;

void store_be64(uint8_t* p, uint64_t v) {
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = uint8_t(v);
}
uint64_t load_be64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}
}  // namespace

DatagramAuth::DatagramAuth(std::string secret)
    : secret_(std::move(secret)), counter_(uint64_t(std::time(nullptr)) << 32) {}

std::array<uint8_t, 16> DatagramAuth::tag(const uint8_t* data, size_t len) const {
  uint8_t mac[EVP_MAX_MD_SIZE];
  size_t mac_len = 0;
  std::array<uint8_t, 16> out{};
  if (EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, secret_.data(), secret_.size(), data,
                len, mac, sizeof mac, &mac_len) &&
      mac_len >= out.size())
    std::memcpy(out.data(), mac, out.size());
  return out;
}

size_t DatagramAuth::sign(const uint8_t* datagram, size_t len, uint8_t* out) {
  std::memcpy(out, datagram, len);
  if (!enabled()) return len;
  out[kFlagByte] |= kAuthFlag;
  store_be64(out + len, counter_.fetch_add(1) + 1);
  const auto t = tag(out, len + 8);
  std::memcpy(out + len + 8, t.data(), t.size());
  return len + kAuthTrailer;
}

bool DatagramAuth::verify(const uint8_t* datagram, size_t* len, uint64_t sender) {
  if (*len < kHeaderSize) return false;
  const bool flagged = datagram[kFlagByte] & kAuthFlag;
  if (!enabled()) return !flagged;
  if (!flagged || *len < kHeaderSize + kAuthTrailer) return false;
  const size_t body = *len - kAuthTrailer;
  const auto want = tag(datagram, body + 8);
  // Constant time: how much of a forged tag was right is not to be learnt.
  uint8_t diff = 0;
  for (size_t i = 0; i < want.size(); ++i) diff |= uint8_t(want[i] ^ datagram[body + 8 + i]);
  if (diff != 0 || !fresh(sender, load_be64(datagram + body))) return false;
  *len = body;
  return true;
}

bool DatagramAuth::fresh(uint64_t sender, uint64_t counter) {
  std::lock_guard lock(windows_mutex_);
  Window& w = windows_[sender];
  if (counter > w.highest) {
    const uint64_t shift = counter - w.highest;
    w.seen = shift >= kWindow ? 0 : w.seen << shift;
    w.seen |= 1;
    w.highest = counter;
    return true;
  }
  const uint64_t age = w.highest - counter;
  if (age >= kWindow || (w.seen >> age) & 1) return false;
  w.seen |= uint64_t{1} << age;
  return true;
}

}  // namespace ibemu::fabric
