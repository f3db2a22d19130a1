#include "common/pcap_writer.h"

#include <algorithm>
#include <cerrno>

namespace ibemu {

namespace {
// libpcap's file header with the nanosecond-resolution magic number.
struct FileHeader {
  uint32_t magic = 0xa1b23c4d;
  uint16_t version_major = 2;
  uint16_t version_minor = 4;
  int32_t thiszone = 0;
  uint32_t sigfigs = 0;
  uint32_t snaplen = 65535;
  uint32_t linktype = kLinktypeErf;
};
// An ERF record header (the ERF types document), as ibdump writes it.
struct ErfHeader {
  uint64_t timestamp;    // little-endian: seconds << 32 | binary fraction
  uint8_t type = 21;     // ERF_TYPE_INFINIBAND
  uint8_t flags = 0x04;  // varying record length, interface 0
  uint8_t rlen[2];       // big-endian: header + packet
  uint8_t lctr[2] = {0, 0};
  uint8_t wlen[2];  // big-endian: the packet
};
static_assert(sizeof(ErfHeader) == 16);

void store_be16(uint8_t* p, size_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
struct RecordHeader {
  uint32_t ts_sec;
  uint32_t ts_nsec;
  uint32_t incl_len;
  uint32_t orig_len;
};
}  // namespace

PcapWriter::PcapWriter(std::string path, uint32_t linktype, uint64_t max_bytes, unsigned files)
    : path_(std::move(path)),
      linktype_(linktype),
      max_bytes_(max_bytes),
      files_(std::max(1u, files)) {}

PcapWriter::~PcapWriter() {
  if (file_) std::fclose(file_);
}

std::string PcapWriter::current_path() const {
  return index_ == 0 ? path_ : path_ + "." + std::to_string(index_);
}

int PcapWriter::open() { return start_file(); }

int PcapWriter::start_file() {
  if (file_) std::fclose(file_);
  file_ = std::fopen(current_path().c_str(), "wb");
  if (!file_) return errno;
  FileHeader h;
  h.linktype = linktype_;
  if (std::fwrite(&h, sizeof h, 1, file_) != 1) return errno ? errno : EIO;
  written_ = sizeof h;
  return 0;
}

int PcapWriter::write(uint64_t time_ns, const uint8_t* packet, size_t len) {
  if (!file_) return EBADF;
  const uint64_t sec = time_ns / 1000000000, nsec = time_ns % 1000000000;
  const bool erf = linktype_ == kLinktypeErf;
  ErfHeader e;
  e.timestamp = sec << 32 | (nsec << 32) / 1000000000;
  store_be16(e.rlen, sizeof e + len);
  store_be16(e.wlen, len);
  const size_t record = (erf ? sizeof e : 0) + len;
  const RecordHeader r{uint32_t(sec), uint32_t(nsec), uint32_t(record), uint32_t(record)};
  if (std::fwrite(&r, sizeof r, 1, file_) != 1 ||
      (erf && std::fwrite(&e, sizeof e, 1, file_) != 1) ||
      std::fwrite(packet, 1, len, file_) != len)
    return errno ? errno : EIO;
  written_ += sizeof r + record;
  if (max_bytes_ && written_ >= max_bytes_) {
    index_ = (index_ + 1) % files_;
    return start_file();
  }
  return 0;
}

int PcapWriter::flush() {
  if (file_ && std::fflush(file_) != 0) return errno ? errno : EIO;
  return 0;
}

}  // namespace ibemu
