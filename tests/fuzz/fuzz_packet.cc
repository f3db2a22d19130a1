// Every byte that reaches an HCA from the link is untrusted. An input is one
// packet, or — when it starts with kEditMarker — edits to a real packet of
// the traffic below (RC SEND, SEND with immediate, RDMA WRITE with and
// without immediate, RDMA READ, atomics, ACKs and READ responses): the
// packet is picked by the next byte and the rest is XORed over it, so the
// fuzzer reaches the QPs with well-formed headers carrying hostile values.
// The packet parser and describe_packet() see each input, with and without
// CRC checks, and then the engines of a live RC connection do.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/unit/engine_test_fixture.h"

namespace {

using namespace ibemu;
using namespace ibemu::engine;
using namespace ibemu::engine::testing;

constexpr uint8_t kEditMarker = 0xed;

struct World {
  World() : pair(params()) {
    for (Endpoint* e : {&pair.a, &pair.b}) e->engine.set_verify_crcs(false);
    msg = std::make_unique<Message>(pair.a, pair.b, 2 * 256 + 17, 1);
    target = std::make_unique<Target>(pair.b, 1024);
    traffic();
    real = pair.link.log();
  }

  static ConnectParams params() {
    ConnectParams p;
    p.path_mtu = 1;  // 256 bytes: multi-packet messages from small buffers
    p.max_rd_atomic = p.max_dest_rd_atomic = 4;
    p.timeout = 1;
    return p;
  }

  /// One of each kind of request, and the responses they draw.
  void traffic() {
    const Message& m = *msg;
    post(*pair.b.qp, recv_wr(1, m.recv_sges));
    post(*pair.b.qp, recv_wr(2, m.recv_sges));
    post(*pair.b.qp, recv_wr(3, m.recv_sges));
    post(*pair.a.qp, send_wr(10, WrOpcode::kSend, m.send_sges));
    post(*pair.a.qp, send_wr(11, WrOpcode::kSendWithImm, m.send_sges));
    post(*pair.a.qp, write_wr(12, m.send_sges, target->va(), target->rkey()));
    SendWqe wimm = write_wr(13, m.send_sges, target->va(), target->rkey());
    wimm.opcode = WrOpcode::kRdmaWriteWithImm;
    post(*pair.a.qp, wimm);
    SendWqe read = write_wr(14, m.recv_sges, target->va(), target->rkey());
    read.opcode = WrOpcode::kRdmaRead;
    post(*pair.a.qp, read);
    SendWqe add = write_wr(15, {m.recv_sges[0]}, target->va(), target->rkey());
    add.opcode = WrOpcode::kAtomicFetchAndAdd;
    add.sge[0].length = 8;
    add.compare_add = 5;
    post(*pair.a.qp, add);
    pair.run_until([&] { return pair.a.send_wcs.size() >= 6; }, std::chrono::seconds(2));
  }

  /// Keeps receives posted and both QPs able to take the next input.
  void settle() {
    pair.link.deliver_all();
    pair.link.clear_log();  // the link's record of traffic would grow without end
    pair.a.poll();
    pair.b.poll();
    pair.a.send_wcs.clear();
    pair.b.recv_wcs.clear();
    if (pair.a.state() == QpState::kErr || pair.b.state() == QpState::kErr) reconnect();
    if (++inputs % 8 == 0) post(*pair.b.qp, recv_wr(inputs, msg->recv_sges));
  }

  void reconnect() {
    const ConnectParams p = params();
    for (Endpoint* e : {&pair.a, &pair.b}) {
      QpAttr reset;
      reset.qp_state = QpState::kReset;
      e->qp->modify(reset, kQpState);
    }
    pair.link.discard_queued();
    connect_qp(pair.a, p, kLidB, kQpnB, p.sq_psn_b, p.sq_psn_a, p.access_a);
    connect_qp(pair.b, p, kLidA, kQpnA, p.sq_psn_a, p.sq_psn_b, p.access_b);
  }

  /// IBEMU_FUZZ_WRITE_SEEDS=DIR: the real packets, one file each (the
  /// committed corpus comes from here).
  void write_seeds(const char* dir) const {
    for (size_t i = 0; i < real.size(); ++i) {
      std::ofstream raw(std::string(dir) + "/raw-" + std::to_string(i), std::ios::binary);
      raw.write(reinterpret_cast<const char*>(real[i].bytes.data()), real[i].bytes.size());
      std::ofstream edit(std::string(dir) + "/edit-" + std::to_string(i), std::ios::binary);
      const char head[2] = {char(kEditMarker), char(i)};
      edit.write(head, 2);
    }
  }

  EnginePair pair;
  std::unique_ptr<Message> msg;
  std::unique_ptr<Target> target;
  std::vector<WirePacket> real;
  uint64_t inputs = 0;
};

World& world() {
  static World* w = [] {
    auto* made = new World;
    if (const char* dir = std::getenv("IBEMU_FUZZ_WRITE_SEEDS")) made->write_seeds(dir);
    return made;
  }();
  return *w;
}

void parse_everything(const std::vector<uint8_t>& bytes) {
  for (bool verify : {true, false}) {
    wire::PacketView v;
    if (wire::parse_packet(bytes.data(), bytes.size(), &v, verify) != wire::ParseError::kOk)
      continue;
    // Every accessor of a parsed packet stays inside it.
    volatile uint64_t sink = v.lrh().dlid() + v.bth().psn() + v.reth().va() + v.aeth().syndrome() +
                             v.atomic_eth().swap_add() + v.deth().qkey() + v.immdt().imm() +
                             v.ieth().rkey() + v.xrceth().srqn() + v.grh().hop_limit();
    for (size_t i = 0; i < v.payload_len; ++i) sink = sink + v.payload()[i];
    (void)sink;
    (void)wire::describe_packet(v);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = world();
  std::vector<uint8_t> bytes(data, data + size);
  if (size >= 2 && data[0] == kEditMarker && !w.real.empty()) {
    const WirePacket& base = w.real[data[1] % w.real.size()];
    bytes = base.bytes;
    for (size_t i = 2; i < size && i - 2 < bytes.size(); ++i) bytes[i - 2] ^= data[i];
  }
  bytes.shrink_to_fit();  // an exact-size buffer: over-reads are caught
  parse_everything(bytes);
  const uint16_t dlid =
      bytes.size() >= wire::Lrh::kSize ? wire::Lrh::from(bytes.data()).dlid() : kLidB;
  (dlid == kLidA ? w.pair.a : w.pair.b).engine.receive(bytes.data(), bytes.size());
  w.settle();
  return 0;
}
