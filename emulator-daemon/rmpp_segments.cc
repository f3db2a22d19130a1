#include "emulator-daemon/rmpp_segments.h"

#include <algorithm>
#include <cstring>

#include "common/mad/mad.h"

namespace ibemu {

namespace {

constexpr size_t kMadSize = 256;
constexpr size_t kRmppHeaderEnd = 36;  // MAD header (24) + RMPP header (12)
constexpr uint8_t kRmppTypeData = 1;
constexpr uint8_t kFlagActive = 0x01, kFlagFirst = 0x02, kFlagLast = 0x04;
constexpr uint8_t kSubnAdmClass = 0x03;
constexpr size_t kSaHeaderEnd = 56;  // + SA header (20)
// A transfer whose segments stop coming is forgotten.
constexpr auto kTransferLifetime = std::chrono::seconds(2);

/// Where the data of a segment starts: the class's headers are repeated in
/// every segment (Linux: ib_get_mad_data_offset).
size_t data_offset(uint8_t mgmt_class) {
  return mgmt_class == kSubnAdmClass ? kSaHeaderEnd : kRmppHeaderEnd;
}

bool rmpp_active(const uint8_t* mad, size_t len) {
  return len >= kRmppHeaderEnd && mad[24] != 0 && (mad[26] & kFlagActive);
}

}  // namespace

bool needs_rmpp_segments(const uint8_t* mad, size_t len) {
  return len > kMadSize && rmpp_active(mad, len);
}

std::vector<MadSegment> rmpp_segments(const uint8_t* mad, size_t len) {
  std::vector<MadSegment> out;
  const size_t hdr = data_offset(mad[1]);
  if (len <= hdr) return out;
  const size_t per_segment = kMadSize - hdr;
  const size_t data = len - hdr;
  const size_t count = (data + per_segment - 1) / per_segment;
  for (size_t i = 0; i < count; ++i) {
    MadSegment seg{};
    std::memcpy(seg.data(), mad, hdr);
    const size_t n = std::min(per_segment, data - i * per_segment);
    std::memcpy(seg.data() + hdr, mad + hdr + i * per_segment, n);
    seg[25] = kRmppTypeData;
    uint8_t flags = kFlagActive;
    if (i == 0) flags |= kFlagFirst;
    if (i + 1 == count) flags |= kFlagLast;
    seg[26] = uint8_t((seg[26] & 0xf8) | flags);
    mad::store_be32(seg.data() + 28, uint32_t(i + 1));
    // PayloadLength: the whole payload in the first segment, what the last
    // one carries in the last (the receiver trims the pad by it).
    const size_t class_header = hdr - kRmppHeaderEnd;
    uint32_t paylen = 0;
    if (i + 1 == count) paylen = uint32_t(class_header + n);
    if (i == 0) paylen = uint32_t(class_header + data);
    mad::store_be32(seg.data() + 32, paylen);
    out.push_back(seg);
  }
  return out;
}

bool RmppReassembly::is_partial_segment(const uint8_t* mad, size_t len) {
  if (len != kMadSize || !rmpp_active(mad, len) || mad[25] != kRmppTypeData) return false;
  return (mad[26] & (kFlagFirst | kFlagLast)) != (kFlagFirst | kFlagLast);
}

std::optional<std::vector<uint8_t>> RmppReassembly::add(uint16_t slid, const uint8_t* seg,
                                                        size_t len, Clock::time_point now) {
  std::erase_if(transfers_,
                [&](const auto& t) { return now - t.second.started > kTransferLifetime; });
  if (len != kMadSize) return std::nullopt;
  const auto key = std::make_pair(slid, mad::load_be64(seg + 8));
  const size_t hdr = data_offset(seg[1]);
  const uint32_t number = mad::load_be32(seg + 28);
  const bool first = seg[26] & kFlagFirst, last = seg[26] & kFlagLast;
  auto it = transfers_.find(key);
  if (first) {
    Transfer t;
    t.mad.assign(seg, seg + hdr);
    t.started = now;
    it = transfers_.insert_or_assign(key, std::move(t)).first;
  }
  if (it == transfers_.end() || number != it->second.next_segment) {
    if (it != transfers_.end()) transfers_.erase(it);
    return std::nullopt;
  }
  Transfer& t = it->second;
  size_t n = kMadSize - hdr;
  if (last) {
    const size_t paylen = mad::load_be32(seg + 32), class_header = hdr - kRmppHeaderEnd;
    n = std::min(n, paylen > class_header ? paylen - class_header : 0);
  }
  t.mad.insert(t.mad.end(), seg + hdr, seg + hdr + n);
  ++t.next_segment;
  if (!last) return std::nullopt;
  std::vector<uint8_t> whole = std::move(t.mad);
  transfers_.erase(it);
  // Handed over as one transfer: the flags of a whole RMPP MAD.
  whole[26] = uint8_t((whole[26] & 0xf8) | kFlagActive | kFlagFirst | kFlagLast);
  mad::store_be32(whole.data() + 28, 1);
  return whole;
}

}  // namespace ibemu
