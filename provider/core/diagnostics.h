#pragma once
// The provider's diagnostic channels: IBEMU_TRACE=verbs,packets traces verb
// calls and packets, IBEMU_CHECK=1 warns about programs that break the spec.
// Lines go to IBEMU_TRACE_FILE ("%p" there becomes the pid) or to stderr.
//
// Each hook on the data path first asks on(channel): one load of a variable
// set once when the provider is loaded, so a channel that is off costs a
// predictable branch and nothing else.
#include <string>
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
/// even when several threads (or processes sharing one file) write at once.
void write_line(Channel c, std::string_view line) noexcept;

/// write_line of "ibemu <channel> pid <pid>: <body>": the form of the
/// trace's lines, which say whose they are when programs share one stderr.
void write_tagged_line(Channel c, std::string_view body) noexcept;

/// The channel's word in the line prefix: "verbs", "packets", "check".
std::string_view channel_name(Channel c) noexcept;

/// Parses IBEMU_TRACE's value ("verbs", "packets", "verbs,packets", "all").
/// Unknown words are ignored, so an older provider accepts a newer setting.
unsigned parse_trace_setting(std::string_view value) noexcept;

/// IBEMU_TRACE_FILE's value with each "%p" replaced by `pid`.
std::string trace_file_name(std::string_view pattern, int pid);

}  // namespace ibemu::provider::diagnostics
