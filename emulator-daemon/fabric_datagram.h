#pragma once
// The UDP datagrams that daemons of different hosts exchange
// (docs/architecture.md, "Inter-host links"):
//
//   magic "IBEM" (4 bytes) | version 1 | kind | 2 bytes zero | body
//
//   kind 1, packets: { length (2 bytes, big-endian) | IBA packet } ...
//   kind 2, hello:   a JSON object: the sender's switch GUID and the peers
//                    it knows (seed mode), sent every fabric.hello_ms.
//
// Several IBA packets share one datagram; a receiver splits them and stops
// at the first entry that does not fit (the rest of that datagram is lost,
// as a corrupted frame would be).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ibemu::fabric {

inline constexpr uint8_t kMagic[4] = {'I', 'B', 'E', 'M'};
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kHeaderSize = 8;
inline constexpr size_t kEntryHeader = 2;

enum class Kind : uint8_t { kPackets = 1, kHello = 2 };

/// The kind of a datagram, or nullopt if it is not ours (magic, version).
std::optional<Kind> datagram_kind(const uint8_t* data, size_t len);

/// Fills a packets datagram up to a size limit.
class PacketBatch {
 public:
  explicit PacketBatch(size_t limit);
  /// Appends a packet; false (and nothing appended) when it does not fit.
  bool add(const uint8_t* packet, size_t len);
  bool empty() const { return count_ == 0; }
  size_t count() const { return count_; }
  const uint8_t* data() const { return buf_.data(); }
  size_t size() const { return buf_.size(); }
  void clear();

 private:
  size_t limit_;
  size_t count_ = 0;
  std::vector<uint8_t> buf_;
};

/// Calls `fn` for each packet of a packets datagram; the number of packets,
/// and `*malformed` set when an entry ran past the end.
size_t for_each_packet(const uint8_t* data, size_t len,
                       const std::function<void(const uint8_t*, size_t)>& fn,
                       bool* malformed = nullptr);

/// A hello datagram around `json_text`, and its text back.
std::vector<uint8_t> hello_datagram(const std::string& json_text);
std::string hello_text(const uint8_t* data, size_t len);

}  // namespace ibemu::fabric
