#pragma once
// The provider's diagnostic channels: IBEMU_TRACE=verbs,packets traces verb
// calls and packets, IBEMU_CHECK=1 warns about programs that break the spec.
// Lines go to IBEMU_TRACE_FILE ("%p" there becomes the pid) or to stderr.
//
// Each hook on the data path first asks on(channel): one load of a variable
// set once when the provider is loaded, so a channel that is off costs a
// predictable branch and nothing else.
#include <string_view>

namespace ibemu::provider::diagnostics {

enum Channel : unsigned {
  kVerbs = 1u << 0,    // IBEMU_TRACE=verbs
  kPackets = 1u << 1,  // IBEMU_TRACE=packets
  kChecks = 1u << 2,   // IBEMU_CHECK=1
};

/// The channels the environment turned on (read once, at first use).
unsigned enabled() noexcept;

inline bool on(Channel c) noexcept { return (enabled() & c) != 0; }

/// Writes one line (a newline is added) to the channel's destination, whole,
/// even when several threads write at once.
void write_line(Channel c, std::string_view line) noexcept;

/// Parses IBEMU_TRACE's value ("verbs", "packets", "verbs,packets", "all").
/// Unknown words are ignored, so an older provider accepts a newer setting.
unsigned parse_trace_setting(std::string_view value) noexcept;

}  // namespace ibemu::provider::diagnostics
