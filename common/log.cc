#include "common/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace ibemu {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
const char* tag(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "?";
}
}  // namespace

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }

LogLevel parse_log_level(std::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "warn") return LogLevel::kWarn;
  if (name == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

bool log_enabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void log_line(LogLevel level, std::string_view text) {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t t = system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::fprintf(stderr, "%02d:%02d:%02d.%03d %s %.*s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
               static_cast<int>(ms), tag(level), static_cast<int>(text.size()), text.data());
  std::fflush(stderr);
}

}  // namespace ibemu
