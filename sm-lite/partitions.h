#pragma once
// ibemu-sm's partitions (IBA 10.9): which end ports are full or limited
// members of which partition, read from a file in opensm's partitions.conf
// syntax, and the P_Key table that gives each port its memberships.
//
//   # comment
//   Default=0x7fff : ALL=full ;
//   storage=0x0001, ipoib : ALL=limited, 0x02007cddb7000101=full ;
//
// A definition is `Name[=PKey][,flag...] : member[=full|limited|both], ... ;`
// and may span lines. Members are port GUIDs or ALL, ALL_CAS, ALL_SWITCHES,
// SELF (the SM's port); a member without `=` is limited unless the
// definition's `defmember=` flag says otherwise. Other flags (ipoib, mtu,
// rate, sl, scope, ...) concern multicast groups, which ibemu-sm leaves to
// the SA, and are accepted and ignored. As in opensm, every port is a
// limited member of the default partition (0x7fff) and the SM's port a full
// one unless the file defines the default partition itself.
#include <cstdint>
#include <string>
#include <vector>

namespace ibemu::sm {

/// How a port belongs to a partition: limited (P_Key bit 15 clear), full
/// (set), or both keys in its table.
enum class Membership : uint8_t { kNone = 0, kLimited = 1, kFull = 2, kBoth = 3 };

struct PartitionMember {
  enum class Kind : uint8_t { kGuid, kAll, kAllCas, kAllSwitches, kSelf };
  Kind kind = Kind::kGuid;
  uint64_t guid = 0;  // kGuid: a port GUID
  Membership membership = Membership::kLimited;
};

struct Partition {
  std::string name;
  uint16_t pkey = 0;  // the partition's 15 bits
  std::vector<PartitionMember> members;
};

/// Parses a partitions file. Throws std::runtime_error("line N: ...") for
/// what it cannot read: a P_Key of 0 or above 0x7fff, a member that is not
/// a GUID or keyword, a definition without ':' or ';'.
std::vector<Partition> parse_partitions(const std::string& text);

/// An end port as the SM sees it: a CA port or a switch's port 0.
struct EndPort {
  uint64_t guid = 0;
  bool is_switch = false;
  bool is_sm = false;  // the SM's own port (SELF)
};

/// The P_Key table of `port`: the default partition first, then the others
/// in the file's order, each as full (0x8000 | key) or limited member; a
/// port in both gets both keys, the full one first. At most `capacity`
/// entries (NodeInfo:PartitionCap), the rest 0x0000.
std::vector<uint16_t> pkey_table(const std::vector<Partition>& partitions, const EndPort& port,
                                 size_t capacity);

}  // namespace ibemu::sm
