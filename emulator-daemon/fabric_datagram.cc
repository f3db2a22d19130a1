#include "emulator-daemon/fabric_datagram.h"

#include <cstring>

namespace ibemu::fabric {

namespace {
void put_header(std::vector<uint8_t>& buf, Kind kind) {
  buf.assign(kHeaderSize, 0);
  std::memcpy(buf.data(), kMagic, sizeof kMagic);
  buf[4] = kVersion;
  buf[5] = uint8_t(kind);
}
}  // namespace

std::optional<Kind> datagram_kind(const uint8_t* data, size_t len) {
  if (!data || len < kHeaderSize || std::memcmp(data, kMagic, sizeof kMagic) != 0 ||
      data[4] != kVersion)
    return std::nullopt;
  if (data[5] == uint8_t(Kind::kPackets)) return Kind::kPackets;
  if (data[5] == uint8_t(Kind::kHello)) return Kind::kHello;
  return std::nullopt;
}

PacketBatch::PacketBatch(size_t limit) : limit_(limit) { clear(); }

void PacketBatch::clear() {
  put_header(buf_, Kind::kPackets);
  count_ = 0;
}

bool PacketBatch::add(const uint8_t* packet, size_t len) {
  if (len == 0 || len > 0xffff || buf_.size() + kEntryHeader + len > limit_) return false;
  buf_.push_back(uint8_t(len >> 8));
  buf_.push_back(uint8_t(len));
  buf_.insert(buf_.end(), packet, packet + len);
  ++count_;
  return true;
}

size_t for_each_packet(const uint8_t* data, size_t len,
                       const std::function<void(const uint8_t*, size_t)>& fn, bool* malformed) {
  if (malformed) *malformed = false;
  if (datagram_kind(data, len) != Kind::kPackets) {
    if (malformed) *malformed = true;
    return 0;
  }
  size_t n = 0;
  for (size_t off = kHeaderSize; off < len;) {
    if (len - off < kEntryHeader) {
      if (malformed) *malformed = true;
      break;
    }
    const size_t plen = size_t(data[off]) << 8 | data[off + 1];
    off += kEntryHeader;
    if (plen == 0 || plen > len - off) {
      if (malformed) *malformed = true;
      break;
    }
    fn(data + off, plen);
    off += plen;
    ++n;
  }
  return n;
}

std::vector<uint8_t> hello_datagram(const std::string& json_text) {
  std::vector<uint8_t> buf;
  put_header(buf, Kind::kHello);
  buf.insert(buf.end(), json_text.begin(), json_text.end());
  return buf;
}

std::string hello_text(const uint8_t* data, size_t len) {
  if (datagram_kind(data, len) != Kind::kHello) return {};
  return std::string(reinterpret_cast<const char*>(data) + kHeaderSize, len - kHeaderSize);
}

}  // namespace ibemu::fabric
