#include "sm-lite/partitions.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

namespace ibemu::sm {

namespace {

constexpr uint16_t kDefaultPartition = 0x7fff;

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (size_t at = 0;;) {
    const size_t next = s.find(sep, at);
    out.push_back(trim(s.substr(at, next == std::string_view::npos ? next : next - at)));
    if (next == std::string_view::npos) return out;
    at = next + 1;
  }
}

[[noreturn]] void fail(int line, const std::string& what) {
  throw std::runtime_error(fmt::format("line {}: {}", line, what));
}

/// A whole number (decimal, 0x hex or 0 octal, as strtoull reads it).
bool parse_number(std::string_view s, uint64_t* out) {
  const std::string text(s);
  if (text.empty() || text[0] == '-' || text[0] == '+') return false;
  char* end = nullptr;
  errno = 0;
  *out = std::strtoull(text.c_str(), &end, 0);
  return errno == 0 && end && *end == '\0';
}

Membership parse_membership(std::string_view s, int line) {
  if (s == "full") return Membership::kFull;
  if (s == "limited") return Membership::kLimited;
  if (s == "both") return Membership::kBoth;
  fail(line, fmt::format("membership \"{}\" is not full, limited or both", s));
}

PartitionMember parse_member(std::string_view text, Membership by_default, int line) {
  const auto eq = text.find('=');
  const std::string_view name = trim(text.substr(0, eq));
  PartitionMember m;
  m.membership =
      eq == std::string_view::npos ? by_default : parse_membership(trim(text.substr(eq + 1)), line);
  if (name == "ALL") {
    m.kind = PartitionMember::Kind::kAll;
  } else if (name == "ALL_CAS") {
    m.kind = PartitionMember::Kind::kAllCas;
  } else if (name == "ALL_SWITCHES") {
    m.kind = PartitionMember::Kind::kAllSwitches;
  } else if (name == "SELF") {
    m.kind = PartitionMember::Kind::kSelf;
  } else if (!parse_number(name, &m.guid) || m.guid == 0) {
    fail(line, fmt::format("member \"{}\" is not a port GUID, ALL, ALL_CAS, ALL_SWITCHES, "
                           "SELF or NONE",
                           name));
  }
  return m;
}

Partition parse_definition(std::string_view text, int line) {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos)
    fail(line, "a partition is \"Name=PKey : members ;\" (no ':')");
  const auto header = split(text.substr(0, colon), ',');
  Partition p;
  const auto eq = header[0].find('=');
  p.name = std::string(trim(header[0].substr(0, eq)));
  uint64_t key = 0;
  if (eq == std::string_view::npos || !parse_number(trim(header[0].substr(eq + 1)), &key) ||
      key > 0xffff || (key & kDefaultPartition) == 0)
    fail(line, fmt::format("partition \"{}\" needs a P_Key (Name=0x0001 .. 0x7fff)", p.name));
  p.pkey = uint16_t(key & kDefaultPartition);  // membership is each member's
  Membership by_default = Membership::kLimited;
  for (size_t i = 1; i < header.size(); ++i) {
    const auto flag_eq = header[i].find('=');
    if (trim(header[i].substr(0, flag_eq)) != "defmember") continue;
    by_default =
        parse_membership(flag_eq == std::string_view::npos ? std::string_view()
                                                           : trim(header[i].substr(flag_eq + 1)),
                         line);
  }
  for (std::string_view member : split(text.substr(colon + 1), ','))
    if (!member.empty() && member != "NONE" && member != "ALL_ROUTERS")
      p.members.push_back(parse_member(member, by_default, line));
  return p;
}

bool covers(const PartitionMember& m, const EndPort& port) {
  switch (m.kind) {
    case PartitionMember::Kind::kAll:
      return true;
    case PartitionMember::Kind::kAllCas:
      return !port.is_switch;
    case PartitionMember::Kind::kAllSwitches:
      return port.is_switch;
    case PartitionMember::Kind::kSelf:
      return port.is_sm;
    case PartitionMember::Kind::kGuid:
      return m.guid == port.guid;
  }
  return false;
}

}  // namespace

std::vector<Partition> parse_partitions(const std::string& text) {
  std::vector<Partition> out;
  std::string statement;
  int line = 1;
  int statement_line = 1;
  bool comment = false;
  for (char c : text) {
    if (c == '\n') {
      ++line;
      comment = false;
    }
    if (comment || c == '#') {
      comment = true;
      continue;
    }
    if (c == ';') {
      if (!trim(statement).empty()) out.push_back(parse_definition(statement, statement_line));
      statement.clear();
      continue;
    }
    if (trim(statement).empty()) statement_line = line;
    statement += c;
  }
  if (!trim(statement).empty()) fail(statement_line, "a partition definition ends with ';'");
  return out;
}

std::vector<uint16_t> pkey_table(const std::vector<Partition>& partitions, const EndPort& port,
                                 size_t capacity) {
  // opensm's default when the file leaves the default partition out.
  const Partition implicit_default{"Default",
                                   kDefaultPartition,
                                   {{PartitionMember::Kind::kAll, 0, Membership::kLimited},
                                    {PartitionMember::Kind::kSelf, 0, Membership::kFull}}};
  std::vector<const Partition*> order;
  const auto defined = std::find_if(partitions.begin(), partitions.end(),
                                    [](const Partition& p) { return p.pkey == kDefaultPartition; });
  order.push_back(defined != partitions.end() ? &*defined : &implicit_default);
  for (const Partition& p : partitions)
    if (p.pkey != kDefaultPartition) order.push_back(&p);

  std::vector<uint16_t> table;
  for (const Partition* p : order) {
    // A port named more than once is the strongest member it is named as.
    Membership m = Membership::kNone;
    for (const PartitionMember& member : p->members)
      if (covers(member, port)) m = std::max(m, member.membership);
    if (m == Membership::kFull || m == Membership::kBoth) table.push_back(0x8000 | p->pkey);
    if (m == Membership::kLimited || m == Membership::kBoth) table.push_back(p->pkey);
  }
  table.resize(capacity, 0);  // past PartitionCap: left out
  return table;
}

}  // namespace ibemu::sm
