// `status` with "details": the QPs, CQs and memory regions of every context,
// which live in the programs, not here. The daemon asks all contexts at once
// through the state page and answers when those the asker may see have
// written their snapshot pages, or when kSnapshotWait has passed: a program
// that is stopped, hung in a debugger or slow never holds up the daemon
// (it only looks at the pages on a timer) nor the status for long.
#include <chrono>

#include "emulator-daemon/daemon.h"

namespace ibemu {

namespace {
// Progress threads look at the request at least every 10 ms; this leaves
// room for a loaded host.
constexpr auto kSnapshotWait = std::chrono::milliseconds(250);
constexpr auto kSnapshotPoll = std::chrono::milliseconds(2);
// Details take at most this much of a reply, so that what one `status`
// costs the daemon is bounded however many programs run; contexts beyond
// it give their totals only.
constexpr size_t kDetailsBudget = 768 * 1024;
}  // namespace

Json Daemon::do_status(SessionInfo& s, const Json& req) {
  if (!req.value("details", false)) return status_reply();
  const uint64_t request = state_page_.request_snapshots();
  // The asker sees the objects of the processes whose inboxes it may have
  // (Config::users): its own, or all for root and on a shared daemon.
  auto visible = [this, &s](SessionId owner) { return may_reach(s, owner); };
  if (snapshots_.answered(request, visible)) return status_with_details(s, request);
  pending_statuses_.push_back({s, request, std::chrono::steady_clock::now() + kSnapshotWait});
  watch_pending_statuses();
  return nullptr;  // ControlServer::reply_later answers it
}

void Daemon::watch_pending_statuses() {
  if (status_timer_armed_ || pending_statuses_.empty()) return;
  status_timer_armed_ = true;
  status_timer_.expires_after(kSnapshotPoll);
  status_timer_.async_wait([this](const boost::system::error_code& ec) {
    status_timer_armed_ = false;
    if (ec) return;  // operation_aborted: the daemon stops
    const auto now = std::chrono::steady_clock::now();
    std::erase_if(pending_statuses_, [&](const PendingStatus& p) {
      auto visible = [this, &p](SessionId owner) { return may_reach(p.asker, owner); };
      if (now < p.deadline && !snapshots_.answered(p.request, visible)) return false;
      server_.reply_later(p.asker.id, status_with_details(p.asker, p.request));
      return true;
    });
    watch_pending_statuses();
  });
}

Json Daemon::status_with_details(const SessionInfo& asker, uint64_t request) {
  Json reply = status_reply();
  std::vector<std::string> names;
  for (const auto& d : config_.devices) names.push_back(d.name);
  size_t budget = kDetailsBudget;
  Json procs = Json::array();
  for (const auto& s : server_.sessions()) {
    auto it = clients_.find(s.id);
    if (it == clients_.end()) continue;
    Json p = process_json(s, it->second);
    if (it->second.contexts > 0) {
      if (may_reach(asker, s.id))
        p["context_details"] = snapshots_.session_json(s.id, request, names, &budget);
      else
        p["hidden"] = true;
    }
    procs.push_back(std::move(p));
  }
  reply["processes"] = std::move(procs);
  return reply;
}

}  // namespace ibemu
