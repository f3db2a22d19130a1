#pragma once
// What one HCA context shows of itself to `ibemu status`: its QPs, CQs and
// memory regions, as JSON. The provider encodes it into its snapshot page
// (common/snapshot_page.h); the daemon decodes what it finds there, keeping
// only well-formed fields of the known kinds (the page is written by a
// program the daemon does not trust), and passes that on to whoever asks.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "transport/engine/snapshot.h"

namespace ibemu {

struct ContextSnapshot {
  /// The most of each kind a snapshot lists; `*_total` says how many exist.
  static constexpr size_t kMaxListed = 256;

  std::vector<engine::QpSnapshot> qps;
  std::vector<engine::CqSnapshot> cqs;
  std::vector<engine::MrSnapshot> mrs;
  uint64_t qps_total = 0, cqs_total = 0, mrs_total = 0;
};

/// "RC", "UC", "UD", "XRC_SEND", "XRC_RECV", "DCI", "DCT".
const char* qp_type_name(engine::QpType type);

nlohmann::json to_json(const ContextSnapshot& s);
/// Nothing when `j` is not a snapshot; entries of a list that are malformed
/// make the whole snapshot malformed, and lists are cut at kMaxListed.
std::optional<ContextSnapshot> context_snapshot_from_json(const nlohmann::json& j) noexcept;

}  // namespace ibemu
