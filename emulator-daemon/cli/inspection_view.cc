#include "emulator-daemon/cli/inspection_view.h"

#include <fmt/format.h>

#include <map>

namespace ibemu {

namespace {

// IBV_ACCESS_* bits as ibv_devinfo-style letters: Local write, remote
// Write, remote Read, Atomic, Mw bind, Zero based.
std::string access_letters(uint32_t access) {
  static constexpr std::pair<uint32_t, char> kBits[] = {{1, 'L'}, {2, 'W'},  {4, 'R'},
                                                        {8, 'A'}, {16, 'M'}, {32, 'Z'}};
  std::string out;
  for (auto [bit, letter] : kBits) out += (access & bit) ? letter : '-';
  return out;
}

// A connected QP's peer "LID 3 QPN 0x12"; nothing for UD and unconnected QPs.
std::string peer(const Json& qp) {
  const uint32_t dest = qp.value("dest_qpn", 0u);
  if (!dest || qp["type"] == "UD") return "";
  return fmt::format("LID {} QPN {:#x}", qp.value("dlid", 0), dest);
}

void print_qps(std::ostream& out, const Json& ctx) {
  const Json& qps = ctx["qps"];
  if (qps.empty()) return;
  out << fmt::format("      {:<9} {:<8} {:<5} {:>4} {:>8} {:>8} {:>6} {:>6} {:>6} {:>7}  {}\n",
                     "QPN", "type", "state", "port", "SQ PSN", "RQ PSN", "sends", "recvs", "unack",
                     "CQs", "peer");
  for (const Json& q : qps)
    out << fmt::format(
        "      {:<9} {:<8} {:<5} {:>4} {:>#8x} {:>#8x} {:>6} {:>6} {:>6} {:>7}  {}\n",
        fmt::format("{:#x}", q["qpn"].get<uint32_t>()), q["type"].get<std::string>(),
        q["state"].get<std::string>(), q["port"].get<int>(), q["sq_psn"].get<uint32_t>(),
        q["rq_psn"].get<uint32_t>(), q["send_wrs"].get<uint32_t>(), q["recv_wrs"].get<uint32_t>(),
        q["unacked"].get<uint32_t>(),
        fmt::format("{}/{}", q["send_cq"].get<uint32_t>(), q["recv_cq"].get<uint32_t>()), peer(q));
  if (ctx.value("qps_total", 0u) > qps.size())
    out << fmt::format("      ... {} QPs in all\n", ctx["qps_total"].get<uint64_t>());
}

void print_cqs(std::ostream& out, const Json& ctx) {
  const Json& cqs = ctx["cqs"];
  if (cqs.empty()) return;
  std::string line = "      CQs:";
  for (const Json& c : cqs)
    line += fmt::format("  {} ({}/{}{})", c["cqn"].get<uint32_t>(), c["pending"].get<uint32_t>(),
                        c["size"].get<uint32_t>(), c["overrun"].get<bool>() ? " OVERRUN" : "");
  out << line << "   (number (pending/size))\n";
}

void print_mrs(std::ostream& out, const Json& ctx) {
  const Json& mrs = ctx["mrs"];
  if (mrs.empty()) return;
  out << fmt::format("      {:<10} {:<10} {:>4} {:>18} {:>12}  {}\n", "lkey", "rkey", "pd",
                     "address", "length", "access");
  for (const Json& m : mrs)
    out << fmt::format("      {:<#10x} {:<#10x} {:>4} {:>#18x} {:>12}  {}{}\n",
                       m["lkey"].get<uint32_t>(), m["rkey"].get<uint32_t>(),
                       m["pd"].get<uint32_t>(), m["iova"].get<uint64_t>(),
                       m["length"].get<uint64_t>(), access_letters(m["access"].get<uint32_t>()),
                       m["on_device"].get<bool>() ? "  GPU" : "");
  if (ctx.value("mrs_total", 0u) > mrs.size())
    out << fmt::format("      ... {} memory regions in all\n", ctx["mrs_total"].get<uint64_t>());
}

void print_context(std::ostream& out, const Json& ctx) {
  out << fmt::format(
      "    context {} on {}", ctx["context"].get<uint64_t>(),
      ctx["device"].is_string() ? ctx["device"].get<std::string>() : ctx["device"].dump());
  if (!ctx.value("answered", false)) {
    out << ": did not answer (stopped, hung or busy)\n";
    return;
  }
  if (ctx.value("omitted", false)) {
    out << fmt::format(": {} QPs, {} CQs, {} MRs (left out: the reply is full)\n",
                       ctx["qps_total"].get<uint64_t>(), ctx["cqs_total"].get<uint64_t>(),
                       ctx["mrs_total"].get<uint64_t>());
    return;
  }
  out << fmt::format(": {} QPs, {} CQs, {} MRs\n", ctx["qps_total"].get<uint64_t>(),
                     ctx["cqs_total"].get<uint64_t>(), ctx["mrs_total"].get<uint64_t>());
  print_qps(out, ctx);
  print_cqs(out, ctx);
  print_mrs(out, ctx);
}

}  // namespace

std::string qp_state_counts(const Json& process) {
  std::map<std::string, int> counts;
  for (const Json& ctx : process.value("context_details", Json::array()))
    for (const Json& q : ctx.value("qps", Json::array())) ++counts[q["state"].get<std::string>()];
  std::string out;
  for (const auto& [state, n] : counts)
    out += fmt::format("{}{} {}", out.empty() ? "" : "  ", state, n);
  return out;
}

void print_processes(std::ostream& out, const Json& status) {
  out << "processes:\n";
  for (const Json& p : status["processes"]) {
    if (p["role"] != "provider") continue;
    out << fmt::format("  pid {:<8} contexts {:<3} QPs {}{}\n", p["pid"].get<int>(),
                       p["contexts"].get<int>(), p["qps"].get<int>(),
                       p.value("hidden", false) ? "  (another user's: details hidden)" : "");
    for (const Json& ctx : p.value("context_details", Json::array())) print_context(out, ctx);
  }
}

}  // namespace ibemu
