// Management datagrams come from any port of the subnet. The first byte of an
// input picks who receives the rest:
//   0: the SMA of every emulated node, as an SMP entering at a CA port or at
//      the switch (LID-routed or directed-route, any hop pointer and path);
//   1: ibemu-sm's subnet administrator (SA queries, MCMemberRecord joins);
//   2: a port's performance management agent (perfquery's requests).
// Each must answer or drop, never read outside the MAD or crash. Sets change
// the emulated subnet as they would a real one; later inputs meet that state.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "emulator-daemon/performance_agent.h"
#include "emulator-daemon/port_counter_registry.h"
#include "sm-lite/smp_transport.h"
#include "sm-lite/subnet_administrator.h"
#include "sm-lite/subnet_manager.h"
#include "tests/unit/subnet_test_util.h"

namespace {

using namespace ibemu;

struct World {
  World()
      : config(testing::two_by_two()),
        subnet(config),
        transport([this](const sm::MadBytes& m) -> std::optional<sm::MadBytes> {
          return subnet.process_smp(PortRef{0, 1}, m.data(), m.size());
        }),
        sm(transport),
        sa(sm),
        counters(config),
        pma(config, counters) {
    if (!sm.sweep()) std::abort();
  }

  Config config;
  Subnet subnet;
  sm::FunctionTransport transport;
  sm::SubnetManager sm;
  sm::SubnetAdministrator sa;
  PortCounterRegistry counters;
  PerformanceAgent pma;
};

World& world() {
  static World* w = new World;
  return *w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  World& w = world();
  const uint8_t target = data[0] % 3;
  // Where it enters: node (0, 1 = CAs; -1 = the switch) and port.
  const PortRef at{int(data[1] % 3) - 1, int(data[1] >> 4) % 5};
  std::vector<uint8_t> mad(data + 2, data + size);  // exact size: over-reads are caught
  switch (target) {
    case 0:
      (void)w.subnet.process_smp(at, mad.data(), mad.size(), uint16_t(data[1] * 257));
      break;
    case 1:
      (void)w.sa.handle(mad.data(), mad.size(), uint16_t(1 + data[1] % 8));
      break;
    default:
      (void)w.pma.handle(at, mad.data(), mad.size());
      break;
  }
  return 0;
}
