// describe_packet(): one-line packet summaries for traces and test failures.
#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <string>

#include "transport/wire/packet.h"

namespace ibemu::wire {
namespace {

// printf-style append; traces are off the data path, so a std::string is fine.
__attribute__((format(printf, 2, 3))) void appendf(std::string& s, const char* fmt, ...) {
  char buf[160];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  // vsnprintf reports the untruncated length; keep what fitted.
  if (n > 0) s.append(buf, std::min(static_cast<size_t>(n), sizeof buf - 1));
}

void append_gid(std::string& s, const char* label, const Gid& g) {
  appendf(s, " %s=", label);
  for (size_t i = 0; i < g.size(); i += 2) {
    appendf(s, "%s%02x%02x", i ? ":" : "", g[i], g[i + 1]);
  }
}

void append_aeth(std::string& s, const Aeth& a) {
  const uint8_t syn = a.syndrome();
  switch (aeth_type(syn)) {
    case AckType::kAck:
      if (aeth_value(syn) == kAethCreditInvalid)
        s += " aeth=ACK credits=invalid";
      else
        appendf(s, " aeth=ACK credits=%u", aeth_value(syn));
      break;
    case AckType::kRnrNak:
      appendf(s, " aeth=RNR_NAK timer=%u", aeth_value(syn));
      break;
    case AckType::kNak:
      appendf(s, " aeth=NAK(%s)", to_string(static_cast<NakCode>(aeth_value(syn))));
      break;
    case AckType::kReserved:
      appendf(s, " aeth=RESERVED(0x%02x)", syn);
      break;
  }
  appendf(s, " msn=0x%06x", a.msn());
}

}  // namespace

std::string describe_packet(const PacketView& v) {
  std::string s;
  if (v.data == nullptr || v.info == nullptr) {
    appendf(s, "INVALID len=%zu", v.len);
    return s;
  }
  const OpcodeInfo& info = *v.info;
  const Lrh lrh = v.lrh();
  const Bth bth = v.bth();
  appendf(s, "%s dlid=%u slid=%u qpn=0x%06x psn=0x%06x len=%zu", info.name, lrh.dlid(), lrh.slid(),
          bth.dest_qp(), bth.psn(), v.payload_len);
  appendf(s, " sl=%u vl=%u pkey=0x%04x", lrh.sl(), lrh.vl(), bth.pkey());
  if (bth.se()) s += " se";
  if (bth.ack_req()) s += " ack_req";
  if (bth.fecn()) s += " fecn";
  if (bth.becn()) s += " becn";
  if (v.has_grh) {
    const Grh grh = v.grh();
    append_gid(s, "sgid", grh.sgid());
    append_gid(s, "dgid", grh.dgid());
  }
  if (info.flags & kHasXrceth) appendf(s, " srqn=0x%06x", v.xrceth().srqn());
  if (info.flags & kHasDceth) {
    const Dceth d = v.dceth();
    appendf(s, " dc_key=0x%016" PRIx64 " dci=0x%06x conn=%u%s", d.access_key(), d.dci_qpn(),
            d.connection(), d.connect() ? " connect" : "");
  }
  if (info.flags & kHasDeth) {
    const Deth d = v.deth();
    appendf(s, " qkey=0x%08x src_qp=0x%06x", d.qkey(), d.src_qp());
  }
  if (info.flags & kHasReth) {
    const Reth r = v.reth();
    appendf(s, " va=0x%" PRIx64 " rkey=0x%08x dma_len=%u", r.va(), r.rkey(), r.dma_len());
  }
  if (info.flags & kHasAtomicEth) {
    const AtomicEth a = v.atomic_eth();
    appendf(s, " va=0x%" PRIx64 " rkey=0x%08x swap_add=0x%" PRIx64 " compare=0x%" PRIx64, a.va(),
            a.rkey(), a.swap_add(), a.compare());
  }
  if (info.flags & kHasAeth) append_aeth(s, v.aeth());
  if (info.flags & kHasAtomicAckEth) {
    appendf(s, " orig=0x%" PRIx64, v.atomic_ack_eth().orig_data());
  }
  if (info.flags & kHasImmDt) appendf(s, " imm=0x%08x", v.immdt().imm_be());
  if (info.flags & kHasIeth) appendf(s, " inv_rkey=0x%08x", v.ieth().rkey());
  return s;
}

}  // namespace ibemu::wire
