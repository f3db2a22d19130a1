#include "emulator-daemon/context_snapshots.h"

#include <utility>

#include "common/context_snapshot.h"

namespace ibemu {

void ContextSnapshots::add(uint64_t context, SessionId session, int device, SnapshotPage page) {
  contexts_[context] = Context{session, device, std::move(page)};
}

void ContextSnapshots::remove(uint64_t context) { contexts_.erase(context); }

void ContextSnapshots::remove_session(SessionId session) {
  std::erase_if(contexts_, [&](const auto& entry) { return entry.second.session == session; });
}

bool ContextSnapshots::answered(uint64_t request,
                                const std::function<bool(SessionId)>& wanted) const {
  for (const auto& [id, c] : contexts_)
    if (wanted(c.session) && !c.page.read(request)) return false;
  return true;
}

Json ContextSnapshots::session_json(SessionId session, uint64_t request,
                                    const std::vector<std::string>& device_names,
                                    size_t* budget) const {
  Json out = Json::array();
  for (const auto& [id, c] : contexts_) {
    if (c.session != session) continue;
    Json entry = {
        {"context", id},
        {"device", c.device < static_cast<int>(device_names.size()) ? Json(device_names[c.device])
                                                                    : Json(c.device)},
        {"answered", false}};
    std::optional<ContextSnapshot> snapshot;
    if (auto text = c.page.read(request)) {
      // What a program wrote is parsed, checked and written anew: nothing
      // but the fields of a snapshot reaches the reply.
      Json parsed = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
      snapshot = context_snapshot_from_json(parsed);
    }
    if (snapshot) {
      entry["answered"] = true;
      Json fields = to_json(*snapshot);
      const size_t size = fields.dump().size();
      if (size <= *budget) {
        *budget -= size;
        entry.update(fields);
      } else {
        entry["omitted"] = true;
        entry["qps_total"] = snapshot->qps_total;
        entry["cqs_total"] = snapshot->cqs_total;
        entry["mrs_total"] = snapshot->mrs_total;
      }
    }
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace ibemu
