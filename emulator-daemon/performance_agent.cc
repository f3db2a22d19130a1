#include "emulator-daemon/performance_agent.h"

#include <algorithm>
#include <cstring>

#include "common/mad/bits.h"
#include "common/mad/mad.h"

namespace ibemu {

namespace {
using mad::Field;

constexpr uint8_t kPerfMgtVersion = 1;
constexpr size_t kPmaDataOffset = 64;  // IBA 16.1.1: after 40 reserved bytes
constexpr uint8_t kAllPorts = 0xff;
constexpr uint16_t kPortCounters = 0x0012;
constexpr uint16_t kPortCountersExtended = 0x001d;
// ClassPortInfo:CapabilityMask (IBA 16.1.3.1): AllPortSelect, and the
// extended counters without the unicast/multicast ones (not kept apart here).
constexpr uint16_t kCapAllPortSelect = 1 << 8;
constexpr uint16_t kCapExtendedWidthNoIetf = 1 << 10;

// IBA 16.1.3.5 PortCounters, bit offsets in the data area.
constexpr Field kPortSelect{8, 8};
constexpr Field kCounterSelect{16, 16};
constexpr Field kXmitDiscards{112, 16};
constexpr Field kXmitData{192, 32}, kRcvData{224, 32}, kXmitPkts{256, 32}, kRcvPkts{288, 32};
// IBA 16.1.4.11 PortCountersExtended.
constexpr Field kExtXmitData{64, 64}, kExtRcvData{128, 64}, kExtXmitPkts{192, 64},
    kExtRcvPkts{256, 64};

// PortCounters stop at their largest value rather than wrap (IBA 16.1.3.5).
uint64_t saturate(uint64_t v, uint8_t width) {
  return std::min<uint64_t>(v, (uint64_t{1} << width) - 1);
}

PortTotals minus(PortTotals a, const PortTotals& b) {
  a.xmit_packets -= b.xmit_packets;
  a.xmit_bytes -= b.xmit_bytes;
  a.rcv_packets -= b.rcv_packets;
  a.rcv_bytes -= b.rcv_bytes;
  a.xmit_discards -= b.xmit_discards;
  a.xmit_stalled_discards -= b.xmit_stalled_discards;
  return a;
}
}  // namespace

PortTotals PerformanceAgent::counted(int device, uint8_t port_select) const {
  PortTotals sum;
  for (int p = 1; p <= config_.devices[device].ports; ++p) {
    if (port_select != kAllPorts && p != port_select) continue;
    auto base = cleared_at_.find({device, p});
    PortTotals t = counters_.port_totals(device, p);
    if (base != cleared_at_.end()) t = minus(t, base->second);
    sum.xmit_packets += t.xmit_packets;
    sum.xmit_bytes += t.xmit_bytes;
    sum.rcv_packets += t.rcv_packets;
    sum.rcv_bytes += t.rcv_bytes;
    sum.xmit_discards += t.xmit_discards;
    sum.xmit_stalled_discards += t.xmit_stalled_discards;
  }
  return sum;
}

void PerformanceAgent::clear(int device, uint8_t port_select) {
  for (int p = 1; p <= config_.devices[device].ports; ++p)
    if (port_select == kAllPorts || p == port_select)
      cleared_at_[{device, p}] = counters_.port_totals(device, p);
}

std::optional<std::vector<uint8_t>> PerformanceAgent::handle(PortRef port, const uint8_t* req,
                                                             size_t len) {
  if (len < mad::kMadSize || req[1] != uint8_t(mad::MgmtClass::kPerfMgt) ||
      (req[3] & mad::kMethodResponseBit))
    return std::nullopt;
  std::vector<uint8_t> resp(req, req + mad::kMadSize);
  resp[3] = uint8_t(mad::Method::kGetResp);
  uint8_t* data = resp.data() + kPmaDataOffset;
  const auto method = mad::Method(req[3]);
  const uint16_t attr = mad::load_be16(req + 16);
  const uint8_t port_select = uint8_t(mad::get_field(data, kPortSelect));
  // The emulated switch (and any node not among this daemon's CAs) counts
  // nothing: it has ClassPortInfo but no PortCounters.
  const bool counts = port.device >= 0 && size_t(port.device) < config_.devices.size();
  const bool port_ok =
      counts && (port_select == kAllPorts ||
                 (port_select >= 1 && port_select <= config_.devices[port.device].ports));
  auto fail = [&](mad::MadStatus s) {
    mad::store_be16(resp.data() + 4, uint16_t(s));
    return resp;
  };
  if (req[2] != kPerfMgtVersion) return fail(mad::MadStatus::kBadVersion);
  if (method != mad::Method::kGet && method != mad::Method::kSet)
    return fail(mad::MadStatus::kUnsupportedMethod);

  if (attr == uint16_t(mad::AttrId::kClassPortInfo) && method == mad::Method::kGet) {
    std::memset(data, 0, mad::kMadSize - kPmaDataOffset);
    data[0] = mad::kBaseVersion;
    data[1] = kPerfMgtVersion;
    mad::store_be16(data + 2, kCapAllPortSelect | kCapExtendedWidthNoIetf);
    data[7] = 18;  // RespTimeValue
    return resp;
  }
  if ((attr != kPortCounters && attr != kPortCountersExtended) || !counts)
    return fail(mad::MadStatus::kUnsupportedMethodAttr);
  if (!port_ok) return fail(mad::MadStatus::kInvalidField);
  // A Set clears the counters its CounterSelect names; here all or none.
  if (method == mad::Method::kSet && mad::get_field(data, kCounterSelect) != 0)
    clear(port.device, port_select);

  const PortTotals t = counted(port.device, port_select);
  std::memset(data + 4, 0, mad::kMadSize - kPmaDataOffset - 4);
  if (attr == kPortCounters) {
    // Data counters count 4-byte words (IBA 16.1.3.5).
    mad::set_field(data, kXmitDiscards, saturate(t.xmit_discards + t.xmit_stalled_discards, 16));
    mad::set_field(data, kXmitData, saturate(t.xmit_bytes / 4, 32));
    mad::set_field(data, kRcvData, saturate(t.rcv_bytes / 4, 32));
    mad::set_field(data, kXmitPkts, saturate(t.xmit_packets, 32));
    mad::set_field(data, kRcvPkts, saturate(t.rcv_packets, 32));
  } else {
    mad::set_field(data, kExtXmitData, t.xmit_bytes / 4);
    mad::set_field(data, kExtRcvData, t.rcv_bytes / 4);
    mad::set_field(data, kExtXmitPkts, t.xmit_packets);
    mad::set_field(data, kExtRcvPkts, t.rcv_packets);
  }
  return resp;
}

}  // namespace ibemu
