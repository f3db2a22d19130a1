#include "provider/core/diagnostics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace ibemu::provider::diagnostics {
namespace {

struct Settings {
  unsigned channels = 0;
  int fd = STDERR_FILENO;
};

Settings read_settings() {
  Settings s;
  if (const char* trace = std::getenv("IBEMU_TRACE")) s.channels |= parse_trace_setting(trace);
  if (const char* check = std::getenv("IBEMU_CHECK");
      check && *check && std::string_view(check) != "0") {
    s.channels |= kChecks;
  }
  const char* file = std::getenv("IBEMU_TRACE_FILE");
  if (s.channels != 0 && file && *file) {
    // O_APPEND: every line is one write(2), so lines of several threads (and
    // of several processes sharing a file) never interleave.
    const int fd = open(trace_file_name(file, getpid()).c_str(),
                        O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) s.fd = fd;
  }
  return s;
}

const Settings& settings() noexcept {
  static const Settings s = read_settings();
  return s;
}

}  // namespace

// "%p" lets the two sides of a pingpong on one host share one setting and
// still write a file each.
std::string trace_file_name(std::string_view pattern, int pid) {
  std::string name;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'p') {
      name += std::to_string(pid);
      ++i;
    } else {
      name += pattern[i];
    }
  }
  return name;
}

std::string_view channel_name(Channel c) noexcept {
  switch (c) {
    case kVerbs:
      return "verbs";
    case kPackets:
      return "packets";
    case kChecks:
      return "check";
  }
  return "trace";
}

unsigned parse_trace_setting(std::string_view value) noexcept {
  unsigned channels = 0;
  while (!value.empty()) {
    const size_t comma = value.find(',');
    const std::string_view word = value.substr(0, comma);
    if (word == "verbs") channels |= kVerbs;
    if (word == "packets") channels |= kPackets;
    if (word == "all") channels |= kVerbs | kPackets;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return channels;
}

unsigned enabled() noexcept { return settings().channels; }

void write_line(Channel, std::string_view line) noexcept {
  try {
    std::string whole;
    whole.reserve(line.size() + 1);
    whole.append(line).push_back('\n');
    // A trace must never stop the program: a short or failed write is dropped.
    [[maybe_unused]] ssize_t n = write(settings().fd, whole.data(), whole.size());
  } catch (...) {
    // Out of memory for the line: it is lost, the program goes on.
  }
}

void write_tagged_line(Channel c, std::string_view body) noexcept {
  try {
    // The pid is read per line: a child forked after the first line has its own.
    std::string line = "ibemu ";
    line.append(channel_name(c)).append(" pid ").append(std::to_string(getpid())).append(": ");
    write_line(c, line.append(body));
  } catch (...) {
  }
}

}  // namespace ibemu::provider::diagnostics
