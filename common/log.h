#pragma once
// Minimal leveled logging for the daemon, the SM and the CLI (not the data
// path): one line per event on stderr, which `ibemu up` sends to a log file.
#include <fmt/format.h>

#include <string_view>

namespace ibemu {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void set_log_level(LogLevel level);
LogLevel parse_log_level(std::string_view name);
bool log_enabled(LogLevel level);
void log_line(LogLevel level, std::string_view text);

template <typename... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... args) {
  if (log_enabled(LogLevel::kDebug))
    log_line(LogLevel::kDebug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  if (log_enabled(LogLevel::kInfo))
    log_line(LogLevel::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args) {
  if (log_enabled(LogLevel::kWarn))
    log_line(LogLevel::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_error(fmt::format_string<Args...> f, Args&&... args) {
  log_line(LogLevel::kError, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace ibemu
