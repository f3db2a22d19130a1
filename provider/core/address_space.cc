#include "provider/core/address_space.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

namespace ibemu::provider {
namespace {

// /proc/self/maps line by line, through a buffer on the stack. A line longer
// than the buffer (a path with many escaped characters) comes back cut: the
// fields that matter come first.
class MapsReader {
 public:
  MapsReader() : fd_(::open("/proc/self/maps", O_RDONLY | O_CLOEXEC)) {}
  ~MapsReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  MapsReader(const MapsReader&) = delete;
  MapsReader& operator=(const MapsReader&) = delete;

  bool opened() const { return fd_ >= 0; }
  bool failed() const { return failed_; }

  /// The next line, without its newline; false at the end (or on an error).
  bool next(std::string_view* line) {
    for (;;) {
      const char* start = buf_ + pos_;
      const char* nl = static_cast<const char*>(std::memchr(start, '\n', len_ - pos_));
      if (nl) {
        pos_ = static_cast<size_t>(nl + 1 - buf_);
        if (skipping_) {
          skipping_ = false;
          continue;
        }
        *line = std::string_view(start, static_cast<size_t>(nl - start));
        return true;
      }
      if (skipping_) {
        pos_ = len_ = 0;
      } else if (pos_ == 0 && len_ == sizeof(buf_)) {
        *line = std::string_view(buf_, len_);  // its start; the rest is skipped
        skipping_ = true;
        pos_ = len_;
        return true;
      }
      if (eof_) {
        if (pos_ == len_ || skipping_) return false;
        *line = std::string_view(start, len_ - pos_);
        pos_ = len_;
        return true;
      }
      std::memmove(buf_, buf_ + pos_, len_ - pos_);
      len_ -= pos_;
      pos_ = 0;
      const ssize_t n = ::read(fd_, buf_ + len_, sizeof(buf_) - len_);
      if (n > 0) {
        len_ += static_cast<size_t>(n);
      } else if (n == 0 || errno != EINTR) {
        eof_ = true;
        failed_ = n < 0;
      }
    }
  }

 private:
  int fd_;
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;
  bool eof_ = false, failed_ = false, skipping_ = false;
};

struct Mapping {
  uintptr_t start = 0, end = 0;
  bool readable = false, writable = false;
  bool pinnable = true;  // false for mappings the kernel never pins (VM_IO | VM_PFNMAP)
};

// A hexadecimal number up to `stop`; advances `s` past `stop`.
bool hex_field(std::string_view& s, char stop, uintptr_t* out) {
  uintptr_t v = 0;
  size_t i = 0;
  for (; i < s.size() && s[i] != stop; ++i) {
    const char c = s[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uintptr_t>(d);
  }
  if (i == 0 || i == s.size()) return false;
  s.remove_prefix(i + 1);
  *out = v;
  return true;
}

// "start-end perms offset dev inode   path" (proc(5)).
bool parse(std::string_view s, Mapping* m) {
  if (!hex_field(s, '-', &m->start) || !hex_field(s, ' ', &m->end) || s.size() < 4) return false;
  m->readable = s[0] == 'r';
  m->writable = s[1] == 'w';
  for (int field = 0; field < 4; ++field) {  // perms, offset, dev, inode
    const size_t space = s.find(' ');
    if (space == std::string_view::npos) {
      s = {};
      break;
    }
    s.remove_prefix(space + 1);
  }
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  // The vDSO's data pages are PFN mappings: get_user_pages refuses them.
  m->pinnable = s.substr(0, 5) != "[vvar";
  return true;
}

}  // namespace

int check_mapped(uintptr_t addr, size_t length, bool writable) noexcept {
  if (length == 0) return 0;
  const uintptr_t end = addr + length;
  if (end < addr) return EINVAL;
  MapsReader maps;
  if (!maps.opened()) return 0;
  uintptr_t next = addr;  // the first byte not yet found mapped
  std::string_view line;
  while (maps.next(&line)) {
    Mapping m;
    if (!parse(line, &m)) continue;
    if (m.end <= next) continue;        // the lines come in address order
    if (m.start > next) return EFAULT;  // a hole
    if (!m.pinnable || !(writable ? m.writable : m.readable)) return EFAULT;
    next = m.end;
    if (next >= end) return 0;
  }
  return maps.failed() ? 0 : EFAULT;
}

}  // namespace ibemu::provider
