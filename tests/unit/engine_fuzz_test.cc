// Every received byte is untrusted: random, truncated and mutated packets —
// most of them made from real ones, resealed so that they pass the link
// checks and reach the QPs — must never crash an engine or wedge a
// connection. Run it under -DIBEMU_SANITIZE=address,undefined as well.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "tests/unit/engine_test_fixture.h"

namespace ibemu::engine {
namespace {

using namespace std::chrono_literals;
using testing::ConnectParams;
using testing::Endpoint;
using testing::EnginePair;
using testing::kLidA;
using testing::kLidB;
using testing::Message;
using testing::Target;
using testing::WirePacket;

/// Rebuilds a packet from its first `header_len` bytes (edited or not) and a
/// new payload: lengths, pad and both CRCs are made consistent again, so the
/// result gets past the link checks to the QP whenever its opcode allows.
std::vector<uint8_t> rebuild(const std::vector<uint8_t>& pkt, size_t header_len,
                             const std::vector<uint8_t>& payload, uint8_t original_lnh) {
  std::vector<uint8_t> out(header_len + payload.size() + 3 + wire::kIcrcSize + wire::kVcrcSize);
  std::memcpy(out.data(), pkt.data(), std::min(header_len, pkt.size()));
  // finalize_packet() trusts LRH:LNH to say where the BTH is: keep it.
  out[1] = static_cast<uint8_t>((out[1] & ~3u) | (original_lnh & 3u));
  if (!payload.empty()) std::memcpy(out.data() + header_len, payload.data(), payload.size());
  out.resize(wire::finalize_packet(out.data(), header_len, payload.size()));
  return out;
}

class EngineFuzz : public ::testing::Test {
 protected:
  // IBEMU_FUZZ_SEED=<n> explores other inputs; the default keeps runs repeatable.
  EngineFuzz() : pair_(params()), rng_(seed()) {}

  static uint32_t seed() {
    const char* s = std::getenv("IBEMU_FUZZ_SEED");
    return s ? static_cast<uint32_t>(std::strtoul(s, nullptr, 0)) : 20240601u;
  }

  static ConnectParams params() {
    ConnectParams p;
    p.path_mtu = 1;  // small packets: more of them, more opcodes per message
    p.max_send_wr = 64;
    p.max_recv_wr = 64;
    p.timeout = 1;  // resends come quickly, and meet the fuzz
    return p;
  }

  /// Real traffic of every kind the engine speaks, captured from the link.
  void capture_corpus() {
    // The corpus packets' R_Keys and addresses stay valid for the whole test.
    corpus_msg_ = std::make_unique<Message>(pair_.a, pair_.b, 3 * 256 + 17, 1);
    corpus_target_ = std::make_unique<Target>(pair_.b, corpus_msg_->data.size());
    const Message& m = *corpus_msg_;
    const Target& t = *corpus_target_;
    for (int round = 0; round < 3; ++round) {
      ASSERT_EQ(testing::post(*pair_.b.qp, testing::recv_wr(1, m.recv_sges)), 0);
      ASSERT_EQ(testing::post(*pair_.b.qp, testing::recv_wr(2, m.recv_sges)), 0);
      ASSERT_EQ(testing::post(*pair_.a.qp, testing::send_wr(3, WrOpcode::kSend, m.send_sges)), 0);
      SendWqe imm = testing::send_wr(4, WrOpcode::kSendWithImm, m.send_sges);
      ASSERT_EQ(testing::post(*pair_.a.qp, imm), 0);
      ASSERT_EQ(testing::post(*pair_.a.qp, testing::write_wr(5, m.send_sges, t.va(), t.rkey())), 0);
      SendWqe wimm = testing::write_wr(6, m.send_sges, t.va(), t.rkey());
      wimm.opcode = WrOpcode::kRdmaWriteWithImm;
      ASSERT_EQ(testing::post(*pair_.a.qp, wimm), 0);  // RNR NAK: no receive left
      pair_.run_for(3ms);
      ASSERT_EQ(testing::post(*pair_.b.qp, testing::recv_wr(7, m.recv_sges)), 0);
      ASSERT_TRUE(pair_.run_until([&] { return pair_.a.send_wcs.size() >= 4u * (round + 1); }));
    }
    corpus_ = pair_.link.log();
    ASSERT_GT(corpus_.size(), 20u);
  }

  /// Brings both QPs back to RTS, with fresh receive WQEs, when either failed.
  void heal() {
    if (pair_.a.state() != QpState::kErr && pair_.b.state() != QpState::kErr) return;
    for (Endpoint* e : {&pair_.a, &pair_.b}) {
      QpAttr reset;
      reset.qp_state = QpState::kReset;
      ASSERT_EQ(e->qp->modify(reset, kQpState), 0);
    }
    pair_.link.discard_queued();
    const ConnectParams p = params();
    testing::connect_qp(pair_.a, p, kLidB, testing::kQpnB, p.sq_psn_b, p.sq_psn_a, p.access_a);
    testing::connect_qp(pair_.b, p, kLidA, testing::kQpnA, p.sq_psn_a, p.sq_psn_b, p.access_b);
    ++heals_;
  }

  /// Keeps real work outstanding so the fuzz meets QPs mid-message.
  void keep_busy() {
    if (rng_() % 2) testing::post(*pair_.b.qp, testing::recv_wr(rng_(), work_->recv_sges));
    if (rng_() % 8 == 0) {
      const WrOpcode ops[] = {WrOpcode::kSend, WrOpcode::kRdmaWrite, WrOpcode::kRdmaWriteWithImm,
                              WrOpcode::kSendWithImm};
      SendWqe w = testing::write_wr(rng_(), work_->send_sges, target_->va(), target_->rkey());
      w.opcode = ops[rng_() % 4];
      testing::post(*pair_.a.qp, w);  // ENOMEM when the queue is full is fine
    }
  }

  HcaEngine& victim(const WirePacket& p) {
    return p.dlid == kLidA ? pair_.a.engine : pair_.b.engine;
  }

  std::vector<uint8_t> random_bytes(size_t n) {
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(rng_());
    return v;
  }

  EnginePair pair_;
  std::mt19937 rng_;
  std::vector<WirePacket> corpus_;
  std::unique_ptr<Message> corpus_msg_, work_;
  std::unique_ptr<Target> corpus_target_;
  std::unique_ptr<Target> target_;
  int heals_ = 0;

  void SetUp() override {
    capture_corpus();
    work_ = std::make_unique<Message>(pair_.a, pair_.b, 2 * 256 + 3, 9);
    target_ = std::make_unique<Target>(pair_.b, work_->data.size());
  }

  /// After the fuzz: the engines still carry a normal transfer.
  void expect_still_working() {
    for (Endpoint* e : {&pair_.a, &pair_.b}) {
      QpAttr to_err;
      to_err.qp_state = QpState::kErr;
      ASSERT_EQ(e->qp->modify(to_err, kQpState), 0);
    }
    pair_.link.policy = nullptr;
    heal();
    pair_.run_for(2ms);  // let flushes and stray packets settle
    pair_.a.send_wcs.clear();
    pair_.b.recv_wcs.clear();
    Message m(pair_.a, pair_.b, 5 * 256 + 1, 77);
    ASSERT_EQ(testing::post(*pair_.b.qp, testing::recv_wr(1, m.recv_sges)), 0);
    ASSERT_EQ(testing::post(*pair_.a.qp, testing::send_wr(2, WrOpcode::kSend, m.send_sges)), 0);
    ASSERT_TRUE(pair_.run_until([&] { return !pair_.a.send_wcs.empty(); }, 5s));
    EXPECT_EQ(pair_.a.send_wcs[0].status, WcStatus::kSuccess);
    ASSERT_EQ(pair_.b.recv_wcs.size(), 1u);
    m.expect_delivered();
  }
};

TEST_F(EngineFuzz, GivenRandomBytesExpectDroppedAsMalformed) {
  for (int i = 0; i < 20000; ++i) {
    const auto junk = random_bytes(rng_() % 300);
    pair_.a.engine.receive(junk.data(), junk.size());
  }
  pair_.a.engine.receive(nullptr, 0);
  pair_.a.engine.receive(nullptr, 100);
  EXPECT_GE(pair_.a.engine.counters().rcv_malformed.load(), 19000u);
  expect_still_working();
}

TEST_F(EngineFuzz, GivenTruncatedOrExtendedRealPacketsExpectNoCrash) {
  for (int i = 0; i < 20000; ++i) {
    const WirePacket& p = corpus_[rng_() % corpus_.size()];
    std::vector<uint8_t> bytes = p.bytes;
    if (rng_() % 2) {
      bytes.resize(rng_() % (bytes.size() + 1));
    } else {
      const auto tail = random_bytes(1 + rng_() % 64);
      bytes.insert(bytes.end(), tail.begin(), tail.end());
    }
    // Shrink to fit so that reads past the end are caught by the sanitizer.
    std::vector<uint8_t> exact(bytes.begin(), bytes.end());
    exact.shrink_to_fit();
    victim(p).receive(exact.data(), exact.size());
    if (i % 64 == 0) pair_.step();
  }
  expect_still_working();
}

TEST_F(EngineFuzz, GivenRandomlyFlippedBytesWithAndWithoutCrcChecksExpectNoCrash) {
  for (bool verify : {true, false}) {
    pair_.a.engine.set_verify_crcs(verify);
    pair_.b.engine.set_verify_crcs(verify);
    for (int i = 0; i < 20000; ++i) {
      const WirePacket& p = corpus_[rng_() % corpus_.size()];
      std::vector<uint8_t> bytes = p.bytes;
      const int flips = 1 + rng_() % 6;
      for (int f = 0; f < flips; ++f) bytes[rng_() % bytes.size()] ^= uint8_t(1u << (rng_() % 8));
      victim(p).receive(bytes.data(), bytes.size());
      if (i % 32 == 0) {
        pair_.step();
        heal();
        keep_busy();
      }
    }
  }
  expect_still_working();
}

TEST_F(EngineFuzz, GivenResealedMutationsOfRealPacketsExpectNoCrashAndConnectionsUsable) {
  // The header fields a QP looks at get values near the ones it expects, so
  // the mutations reach PSN, opcode-sequence, length, R_Key and ACK logic.
  uint64_t reached = 0;
  for (int i = 0; i < 60000; ++i) {
    const WirePacket& p = corpus_[rng_() % corpus_.size()];
    const wire::PacketView v = p.view();
    std::vector<uint8_t> bytes = p.bytes;
    size_t header_len = v.header_len;
    std::vector<uint8_t> payload(v.payload(), v.payload() + v.payload_len);
    const size_t bth_off = v.bth_offset();
    wire::Bth bth = wire::Bth::from(bytes.data() + bth_off);
    switch (rng_() % 8) {
      case 0: {  // another opcode, headers reinterpreted
        const uint8_t op = rng_() % 4 ? uint8_t(rng_() % 0x18) : uint8_t(rng_());
        bth.set_opcode(op);
        header_len = bth_off + wire::Bth::kSize + wire::opcode_info(op).ext_len;
        if (header_len > bytes.size()) bytes.resize(header_len);
        break;
      }
      case 1:  // PSN near what the QPs expect, or anywhere
        bth.set_psn(rng_() % 4 ? wire::psn_add(bth.psn(), uint32_t(int(rng_() % 64) - 32))
                               : uint32_t(rng_()));
        break;
      case 2:  // payload of another length
        payload = random_bytes(rng_() % 2 ? rng_() % 300 : rng_() % (wire::kMaxPayload + 64));
        if (payload.size() > wire::kMaxPayload && rng_() % 2) payload.resize(wire::kMaxPayload);
        break;
      case 3: {  // the extension headers: RETH VA/R_Key/length, AETH, ImmDt
        const size_t ext = bth_off + wire::Bth::kSize;
        for (int f = 0; f < 3 && header_len > ext; ++f)
          bytes[ext + rng_() % (header_len - ext)] = uint8_t(rng_());
        break;
      }
      case 4:  // AckReq, SE, pad count, TVer, P_Key
        bytes[bth_off + 1] = uint8_t(rng_());
        bytes[bth_off + 8] ^= 0x80;
        break;
      case 5:  // destination QP
        bth.set_dest_qp(rng_() % 2 ? uint32_t(rng_()) : p.dest_qp ^ 1);
        break;
      case 6: {  // source or destination LID
        wire::Lrh lrh = wire::Lrh::from(bytes.data());
        if (rng_() % 2)
          lrh.set_slid(uint16_t(rng_() % 5));
        else
          lrh.set_dlid(uint16_t(rng_() % 5));
        lrh.to(bytes.data());
        break;
      }
      default:  // several of the above at once, bytes anywhere in the headers
        for (int f = 0; f < 4; ++f) bytes[rng_() % header_len] = uint8_t(rng_());
        bth = wire::Bth::from(bytes.data() + bth_off);
        break;
    }
    if (bytes.size() >= bth_off + wire::Bth::kSize) bth.to(bytes.data() + bth_off);
    std::vector<uint8_t> pkt =
        rebuild(bytes, header_len, payload, wire::Lrh::from(p.bytes.data()).lnh());
    if (wire::parse_packet(pkt.data(), pkt.size(), nullptr) == wire::ParseError::kOk) ++reached;
    victim(p).receive(pkt.data(), pkt.size());
    if (i % 16 == 0) {
      pair_.step();
      heal();
      keep_busy();
    }
  }
  EXPECT_GT(reached, 20000u);  // most mutations did get past the link checks
  EXPECT_GT(heals_, 10);       // and drove QPs into the error state now and then
  expect_still_working();
}

TEST_F(EngineFuzz, GivenHostileLinkDuringRealTrafficExpectOnlyLegalCompletions) {
  // The link itself rewrites packets in flight; the traffic goes on.
  pair_.link.policy = [this](const WirePacket& p) {
    if (rng_() % 10) return testing::Fate::kDeliver;
    const wire::PacketView v = p.view();
    std::vector<uint8_t> bytes = p.bytes;
    bytes[v.bth_offset() + rng_() % (v.header_len - v.bth_offset())] ^= uint8_t(1u << (rng_() % 8));
    std::vector<uint8_t> payload(v.payload(), v.payload() + v.payload_len);
    auto pkt = rebuild(bytes, v.header_len, payload, v.lrh().lnh());
    victim(p).receive(pkt.data(), pkt.size());
    return testing::Fate::kDrop;
  };
  for (int i = 0; i < 3000; ++i) {
    keep_busy();
    pair_.step();
    heal();
    pair_.clock.advance(20us);  // let timers fire too
  }
  for (const auto& wcs : {pair_.a.send_wcs, pair_.b.recv_wcs})
    for (const Completion& c : wcs)
      EXPECT_NE(std::string(to_string(c.status)), "unknown") << int(c.status);
  expect_still_working();
}

}  // namespace
}  // namespace ibemu::engine
