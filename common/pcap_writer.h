#pragma once
// Writes packet captures in libpcap's file format with nanosecond
// timestamps, each record one IBA packet from the LRH through the VCRC, in
// one of two link types:
//   - LINKTYPE_ERF (197), each packet behind an ERF record header of type
//     InfiniBand: what Mellanox's ibdump writes and what Wireshark and tshark
//     dissect as InfiniBand (they map no pcap link type to it otherwise);
//   - LINKTYPE_INFINIBAND (247), the bare packets, for tools that read it.
// With a size limit it keeps a ring of files, as tcpdump -C/-W does:
// FILE, FILE.1, ... FILE.(N-1), the oldest overwritten.
#include <cstdint>
#include <cstdio>
#include <string>

namespace ibemu {

inline constexpr uint32_t kLinktypeErf = 197;
inline constexpr uint32_t kLinktypeInfiniband = 247;

class PcapWriter {
 public:
  /// `max_bytes` 0: one file without a limit. Otherwise each file ends after
  /// the record that takes it past `max_bytes`, and `files` of them rotate.
  PcapWriter(std::string path, uint32_t linktype = kLinktypeErf, uint64_t max_bytes = 0,
             unsigned files = 1);
  ~PcapWriter();
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  /// 0, or the errno of the failed open/write.
  int open();
  int write(uint64_t time_ns, const uint8_t* packet, size_t len);
  /// 0, or the errno of writing what was buffered (a full disk shows here).
  int flush();
  /// The file the next record goes to.
  std::string current_path() const;

 private:
  int start_file();

  std::string path_;
  uint32_t linktype_;
  uint64_t max_bytes_;
  unsigned files_;
  unsigned index_ = 0;
  uint64_t written_ = 0;
  std::FILE* file_ = nullptr;
};

}  // namespace ibemu
