// The QP state machine (IBA 10.3.1, 11.2.4.2): every (from, to) pair for RC,
// UC and UD against a table written from the spec (it agrees with the Linux
// kernel's qp_state_table, which real HCAs' drivers enforce), attribute
// value checks, and what posting does in each state.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>

#include "tests/unit/engine_test_fixture.h"
#include "transport/engine/qp_state_machine.h"

namespace ibemu::engine {
namespace {

using testing::full_attr;
using S = QpState;

constexpr QpState kStates[] = {S::kReset, S::kInit, S::kRtr, S::kRts, S::kSqd, S::kSqe, S::kErr};
constexpr QpType kTypes[] = {QpType::kRc, QpType::kUc, QpType::kUd};

// Every attribute bit a Modify QP may carry besides the state itself.
constexpr uint32_t kAttrs[] = {kQpCurState,
                               kQpEnSqdAsyncNotify,
                               kQpAccessFlags,
                               kQpPkeyIndex,
                               kQpPort,
                               kQpQkey,
                               kQpAv,
                               kQpPathMtu,
                               kQpTimeout,
                               kQpRetryCnt,
                               kQpRnrRetry,
                               kQpRqPsn,
                               kQpMaxQpRdAtomic,
                               kQpAltPath,
                               kQpMinRnrTimer,
                               kQpSqPsn,
                               kQpMaxDestRdAtomic,
                               kQpPathMigState,
                               kQpCap,
                               kQpDestQpn,
                               kQpRateLimit};

struct Rule {
  bool valid = false;
  uint32_t required = 0;
  uint32_t optional = 0;
};
struct Row {
  QpState from, to;
  Rule rc, uc, ud;
};

constexpr Rule kAny{true, 0, 0};
constexpr Rule kInvalid{};
constexpr uint32_t kCur = kQpCurState;

// IBA 11.2.4.2 (Modify QP), per transition and service type. A pair that is
// not listed is invalid for every type.
const Row kTable[] = {
    // Reset and Error are reachable from every state with no other attribute.
    {S::kReset, S::kReset, kAny, kAny, kAny},
    {S::kReset, S::kErr, kAny, kAny, kAny},
    {S::kInit, S::kReset, kAny, kAny, kAny},
    {S::kInit, S::kErr, kAny, kAny, kAny},
    {S::kRtr, S::kReset, kAny, kAny, kAny},
    {S::kRtr, S::kErr, kAny, kAny, kAny},
    {S::kRts, S::kReset, kAny, kAny, kAny},
    {S::kRts, S::kErr, kAny, kAny, kAny},
    {S::kSqd, S::kReset, kAny, kAny, kAny},
    {S::kSqd, S::kErr, kAny, kAny, kAny},
    {S::kSqe, S::kReset, kAny, kAny, kAny},
    {S::kSqe, S::kErr, kAny, kAny, kAny},
    {S::kErr, S::kReset, kAny, kAny, kAny},
    {S::kErr, S::kErr, kAny, kAny, kAny},

    {S::kReset,
     S::kInit,
     {true, kQpPkeyIndex | kQpPort | kQpAccessFlags, 0},
     {true, kQpPkeyIndex | kQpPort | kQpAccessFlags, 0},
     {true, kQpPkeyIndex | kQpPort | kQpQkey, 0}},
    {S::kInit,
     S::kInit,
     {true, 0, kQpPkeyIndex | kQpPort | kQpAccessFlags},
     {true, 0, kQpPkeyIndex | kQpPort | kQpAccessFlags},
     {true, 0, kQpPkeyIndex | kQpPort | kQpQkey}},
    {S::kInit,
     S::kRtr,
     {true, kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic | kQpMinRnrTimer,
      kQpAltPath | kQpAccessFlags | kQpPkeyIndex},
     {true, kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn, kQpAltPath | kQpAccessFlags | kQpPkeyIndex},
     {true, 0, kQpPkeyIndex | kQpQkey}},
    {S::kRtr,
     S::kRts,
     {true, kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic,
      kCur | kQpAltPath | kQpAccessFlags | kQpMinRnrTimer | kQpPathMigState},
     {true, kQpSqPsn, kCur | kQpAltPath | kQpAccessFlags | kQpPathMigState},
     {true, kQpSqPsn, kCur | kQpQkey}},
    {S::kRts,
     S::kRts,
     {true, 0, kCur | kQpAccessFlags | kQpAltPath | kQpPathMigState | kQpMinRnrTimer},
     {true, 0, kCur | kQpAccessFlags | kQpAltPath | kQpPathMigState},
     {true, 0, kCur | kQpQkey}},
    {S::kRts,
     S::kSqd,
     {true, 0, kQpEnSqdAsyncNotify},
     {true, 0, kQpEnSqdAsyncNotify},
     {true, 0, kQpEnSqdAsyncNotify}},
    {S::kSqd,
     S::kRts,
     {true, 0, kCur | kQpAltPath | kQpAccessFlags | kQpMinRnrTimer | kQpPathMigState},
     {true, 0, kCur | kQpAltPath | kQpAccessFlags | kQpPathMigState},
     {true, 0, kCur | kQpQkey}},
    {S::kSqd,
     S::kSqd,
     {true, 0,
      kQpPort | kQpAv | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic |
          kQpMaxDestRdAtomic | kQpAltPath | kQpAccessFlags | kQpPkeyIndex | kQpMinRnrTimer |
          kQpPathMigState},
     {true, 0, kQpAv | kQpAltPath | kQpAccessFlags | kQpPkeyIndex | kQpPathMigState},
     {true, 0, kQpPkeyIndex | kQpQkey}},
    // Send Queue Error exists for unreliable service only (IBA 10.3.1).
    {S::kSqe, S::kRts, kInvalid, {true, 0, kCur | kQpAccessFlags}, {true, 0, kCur | kQpQkey}},
};

Rule expected(QpType t, QpState from, QpState to) {
  for (const Row& r : kTable)
    if (r.from == from && r.to == to)
      return t == QpType::kRc ? r.rc : t == QpType::kUc ? r.uc : r.ud;
  return kInvalid;
}

std::string name(QpType t) { return t == QpType::kRc ? "RC" : t == QpType::kUc ? "UC" : "UD"; }
std::string pair_name(QpType t, QpState from, QpState to) {
  return name(t) + " " + to_string(from) + "->" + to_string(to);
}

// --- the rule table itself ---

TEST(EngineQpState, GivenEveryPairExpectValidityAndMasksAsInTheSpec) {
  for (QpType t : kTypes)
    for (QpState from : kStates)
      for (QpState to : kStates) {
        SCOPED_TRACE(pair_name(t, from, to));
        const Rule want = expected(t, from, to);
        const TransitionRule got = transition_rule(t, from, to);
        EXPECT_EQ(got.valid, want.valid);
        if (!want.valid) continue;
        EXPECT_EQ(got.required, want.required);
        EXPECT_EQ(got.optional, want.optional);
      }
}

TEST(EngineQpState, GivenInvalidPairExpectEinvalWhateverTheMask) {
  for (QpType t : kTypes)
    for (QpState from : kStates)
      for (QpState to : kStates) {
        if (expected(t, from, to).valid) continue;
        SCOPED_TRACE(pair_name(t, from, to));
        EXPECT_EQ(check_transition(t, from, to, kQpState), EINVAL);
        uint32_t all = kQpState;
        for (uint32_t a : kAttrs) all |= a;
        EXPECT_EQ(check_transition(t, from, to, all), EINVAL);
        // Whatever the table of the reverse direction requires does not help.
        const Rule reverse = expected(t, to, from);
        EXPECT_EQ(check_transition(t, from, to, kQpState | reverse.required), EINVAL);
      }
}

TEST(EngineQpState, GivenValidPairExpectExactlyTheRequiredAndOptionalAttributesAccepted) {
  for (QpType t : kTypes)
    for (QpState from : kStates)
      for (QpState to : kStates) {
        const Rule r = expected(t, from, to);
        if (!r.valid) continue;
        SCOPED_TRACE(pair_name(t, from, to));
        EXPECT_EQ(check_transition(t, from, to, kQpState | r.required), 0);
        EXPECT_EQ(check_transition(t, from, to, kQpState | r.required | r.optional), 0);
        for (uint32_t a : kAttrs) {
          SCOPED_TRACE("attribute bit " + std::to_string(__builtin_ctz(a)));
          if (r.required & a)
            EXPECT_EQ(check_transition(t, from, to, kQpState | (r.required & ~a)), EINVAL);
          else if (r.optional & a)
            EXPECT_EQ(check_transition(t, from, to, kQpState | r.required | a), 0);
          else
            EXPECT_EQ(check_transition(t, from, to, kQpState | r.required | a), EINVAL);
        }
      }
}

TEST(EngineQpState, GivenNoStateInMaskExpectTransitionToTheSameState) {
  // ibv_modify_qp without IBV_QP_STATE modifies attributes in place.
  EXPECT_EQ(check_transition(QpType::kRc, S::kRts, S::kReset, kQpMinRnrTimer), 0);
  EXPECT_EQ(check_transition(QpType::kRc, S::kRtr, S::kRtr, kQpMinRnrTimer), EINVAL);
  EXPECT_EQ(check_transition(QpType::kRc, S::kInit, S::kRts, kQpAccessFlags), 0);
  EXPECT_EQ(check_transition(QpType::kUc, S::kReset, S::kInit, 0), 0);
}

TEST(EngineQpState, GivenUnknownStateExpectEinval) {
  for (QpType t : kTypes) {
    EXPECT_EQ(check_transition(t, S::kUnknown, S::kReset, kQpState), EINVAL);
    EXPECT_EQ(check_transition(t, S::kRts, S::kUnknown, kQpState), EINVAL);
  }
}

// --- Qp::modify on real QPs ---

class QpStateFixture : public ::testing::Test {
 protected:
  std::shared_ptr<Qp> make_qp(QpType t, QpState state) {
    QpInit init;
    init.type = t;
    init.qpn = next_qpn_++;
    init.pd = testing::kPd;
    init.send_cq = &cq_;
    init.recv_cq = &cq_;
    init.max_send_wr = init.max_recv_wr = 16;
    init.max_send_sge = init.max_recv_sge = 4;
    init.max_inline_data = 64;
    auto qp = engine_.create_qp(init, nullptr);
    EXPECT_EQ(testing::bring_to(*qp, state, attr(state)), 0) << to_string(state);
    EXPECT_EQ(qp->state(), state);
    return qp;
  }
  // Realistic values for every field; cur_qp_state names the current state.
  static QpAttr attr(QpState current) {
    QpAttr a = full_attr(testing::kLidB, 0x42);
    a.cur_qp_state = current;
    return a;
  }
  static void expect_same(const QpAttr& x, const QpAttr& y) {
    EXPECT_EQ(x.qp_state, y.qp_state);
    EXPECT_EQ(x.path_mtu, y.path_mtu);
    EXPECT_EQ(x.qkey, y.qkey);
    EXPECT_EQ(x.rq_psn, y.rq_psn);
    EXPECT_EQ(x.sq_psn, y.sq_psn);
    EXPECT_EQ(x.dest_qp_num, y.dest_qp_num);
    EXPECT_EQ(x.qp_access_flags, y.qp_access_flags);
    EXPECT_EQ(x.ah.dlid, y.ah.dlid);
    EXPECT_EQ(x.pkey_index, y.pkey_index);
    EXPECT_EQ(x.max_rd_atomic, y.max_rd_atomic);
    EXPECT_EQ(x.max_dest_rd_atomic, y.max_dest_rd_atomic);
    EXPECT_EQ(x.min_rnr_timer, y.min_rnr_timer);
    EXPECT_EQ(x.port_num, y.port_num);
    EXPECT_EQ(x.timeout, y.timeout);
    EXPECT_EQ(x.retry_cnt, y.retry_cnt);
    EXPECT_EQ(x.rnr_retry, y.rnr_retry);
  }

  testing::NullSink sink_;
  testing::FakePorts ports_{testing::kLidA, testing::kGuidA};
  HcaEngine engine_{&sink_, &ports_};
  CompletionQueue cq_{1024, nullptr};
  uint32_t next_qpn_ = 0x100;
};

// SQE cannot be entered through Modify QP, so its rows are covered by the
// table tests above only.
constexpr QpState kReachable[] = {S::kReset, S::kInit, S::kRtr, S::kRts, S::kSqd, S::kErr};

TEST_F(QpStateFixture, GivenInvalidPairExpectModifyFailsAndQpUnchanged) {
  for (QpType t : kTypes)
    for (QpState from : kReachable)
      for (QpState to : kStates) {
        if (expected(t, from, to).valid) continue;
        SCOPED_TRACE(pair_name(t, from, to));
        auto qp = make_qp(t, from);
        const QpAttr before = qp->query();
        QpAttr a = attr(from);
        a.qp_state = to;
        for (uint32_t mask : {uint32_t{kQpState}, kQpState | testing::init_mask(t),
                              kQpState | testing::rtr_mask(t), kQpState | testing::rts_mask(t)})
          EXPECT_EQ(qp->modify(a, mask), EINVAL) << "mask " << std::hex << mask;
        expect_same(qp->query(), before);
      }
}

TEST_F(QpStateFixture, GivenValidPairExpectMissingRequiredOrStrayAttributeRefused) {
  for (QpType t : kTypes)
    for (QpState from : kReachable)
      for (QpState to : kStates) {
        const Rule r = expected(t, from, to);
        if (!r.valid) continue;
        SCOPED_TRACE(pair_name(t, from, to));
        auto qp = make_qp(t, from);
        const QpAttr before = qp->query();
        QpAttr a = attr(from);
        a.qp_state = to;
        for (uint32_t bit : kAttrs) {
          SCOPED_TRACE("attribute bit " + std::to_string(__builtin_ctz(bit)));
          if (r.required & bit) {
            EXPECT_EQ(qp->modify(a, kQpState | (r.required & ~bit)), EINVAL);
          } else if (!(r.optional & bit)) {
            EXPECT_EQ(qp->modify(a, kQpState | r.required | bit), EINVAL);
          }
          expect_same(qp->query(), before);
        }
        // The exact required set moves the QP.
        EXPECT_EQ(qp->modify(a, kQpState | r.required), 0);
        EXPECT_EQ(qp->state(), to);
        // So does the required set plus every optional attribute.
        auto qp2 = make_qp(t, from);
        EXPECT_EQ(qp2->modify(a, kQpState | r.required | r.optional), 0);
        EXPECT_EQ(qp2->state(), to);
      }
}

TEST_F(QpStateFixture, GivenEachOptionalAttributeAloneExpectAcceptedAndApplied) {
  for (QpType t : kTypes)
    for (QpState from : kReachable)
      for (QpState to : kStates) {
        const Rule r = expected(t, from, to);
        if (!r.valid) continue;
        for (uint32_t bit : kAttrs) {
          if (!(r.optional & bit)) continue;
          SCOPED_TRACE(pair_name(t, from, to) + " attribute bit " +
                       std::to_string(__builtin_ctz(bit)));
          auto qp = make_qp(t, from);
          QpAttr a = attr(from);
          a.qp_state = to;
          a.min_rnr_timer = 20;  // differs from what bring_to() set
          a.qp_access_flags = kAccessLocalWrite;
          EXPECT_EQ(qp->modify(a, kQpState | r.required | bit), 0);
          EXPECT_EQ(qp->state(), to);
          if (bit == kQpMinRnrTimer) {
            EXPECT_EQ(qp->query().min_rnr_timer, 20);
          }
          if (bit == kQpAccessFlags) {
            EXPECT_EQ(qp->query().qp_access_flags, kAccessLocalWrite);
          }
        }
      }
}

TEST_F(QpStateFixture, GivenCurrentStateAttributeExpectItMustNameTheCurrentState) {
  auto qp = make_qp(QpType::kRc, S::kRts);
  QpAttr a = attr(S::kRtr);  // wrong: the QP is in RTS
  a.qp_state = S::kRts;
  EXPECT_EQ(qp->modify(a, kQpState | kQpCurState), EINVAL);
  a.cur_qp_state = S::kRts;
  EXPECT_EQ(qp->modify(a, kQpState | kQpCurState), 0);
}

TEST_F(QpStateFixture, GivenNoStateInMaskExpectAttributesChangedInPlace) {
  auto qp = make_qp(QpType::kRc, S::kRts);
  QpAttr a = attr(S::kRts);
  a.min_rnr_timer = 3;
  EXPECT_EQ(qp->modify(a, kQpMinRnrTimer), 0);
  EXPECT_EQ(qp->state(), S::kRts);
  EXPECT_EQ(qp->query().min_rnr_timer, 3);
  EXPECT_EQ(qp->modify(a, kQpPathMtu), EINVAL);  // not modifiable in RTS
}

struct BadValue {
  const char* what;
  QpState from;
  QpState to;
  uint32_t mask;
  void (*spoil)(QpAttr&);
};

TEST_F(QpStateFixture, GivenOutOfRangeValueExpectEinvalAndQpUnchanged) {
  const BadValue cases[] = {
      {"path_mtu 0", S::kInit, S::kRtr, testing::rtr_mask(QpType::kRc),
       [](QpAttr& a) { a.path_mtu = 0; }},
      {"path_mtu 6", S::kInit, S::kRtr, testing::rtr_mask(QpType::kRc),
       [](QpAttr& a) { a.path_mtu = 6; }},
      {"dlid 0 without GRH", S::kInit, S::kRtr, testing::rtr_mask(QpType::kRc),
       [](QpAttr& a) { a.ah.dlid = 0; }},
      {"max_dest_rd_atomic above the device limit", S::kInit, S::kRtr,
       testing::rtr_mask(QpType::kRc),
       [](QpAttr& a) { a.max_dest_rd_atomic = DeviceLimits::kMaxQpRdAtom + 1; }},
      {"min_rnr_timer 32", S::kInit, S::kRtr, testing::rtr_mask(QpType::kRc),
       [](QpAttr& a) { a.min_rnr_timer = 32; }},
      {"pkey_index 1 (one P_Key per port)", S::kInit, S::kRtr,
       testing::rtr_mask(QpType::kRc) | kQpPkeyIndex, [](QpAttr& a) { a.pkey_index = 1; }},
      {"retry_cnt 8", S::kRtr, S::kRts, testing::rts_mask(QpType::kRc),
       [](QpAttr& a) { a.retry_cnt = 8; }},
      {"rnr_retry 8", S::kRtr, S::kRts, testing::rts_mask(QpType::kRc),
       [](QpAttr& a) { a.rnr_retry = 8; }},
      {"timeout 32", S::kRtr, S::kRts, testing::rts_mask(QpType::kRc),
       [](QpAttr& a) { a.timeout = 32; }},
      {"max_rd_atomic above the device limit", S::kRtr, S::kRts, testing::rts_mask(QpType::kRc),
       [](QpAttr& a) { a.max_rd_atomic = DeviceLimits::kMaxQpInitRdAtom + 1; }},
      {"port 0", S::kReset, S::kInit, testing::init_mask(QpType::kRc),
       [](QpAttr& a) { a.port_num = 0; }},
      {"port 2 (the HCA has one)", S::kReset, S::kInit, testing::init_mask(QpType::kRc),
       [](QpAttr& a) { a.port_num = 2; }},
      {"pkey_index 5", S::kReset, S::kInit, testing::init_mask(QpType::kRc),
       [](QpAttr& a) { a.pkey_index = 5; }},
      {"port 7 in INIT->INIT", S::kInit, S::kInit, kQpState | kQpPort,
       [](QpAttr& a) { a.port_num = 7; }},
  };
  for (const BadValue& c : cases) {
    SCOPED_TRACE(c.what);
    auto qp = make_qp(QpType::kRc, c.from);
    const QpAttr before = qp->query();
    QpAttr a = attr(c.from);
    a.qp_state = c.to;
    // Valid values in the same call must not be applied either.
    a.qp_access_flags = kAccessLocalWrite;
    a.rq_psn = 0x777;
    a.sq_psn = 0x888;
    c.spoil(a);
    EXPECT_EQ(qp->modify(a, c.mask), EINVAL);
    expect_same(qp->query(), before);
    // The same modify with the value repaired goes through.
    QpAttr good = attr(c.from);
    good.qp_state = c.to;
    EXPECT_EQ(qp->modify(good, c.mask), 0);
    EXPECT_EQ(qp->state(), c.to);
  }
}

TEST_F(QpStateFixture, GivenPsnsWiderThan24BitsExpectTheyAreMasked) {
  auto qp = make_qp(QpType::kRc, S::kInit);
  QpAttr a = attr(S::kInit);
  a.qp_state = S::kRtr;
  a.rq_psn = 0x12345678;
  a.dest_qp_num = 0xff000042;
  ASSERT_EQ(qp->modify(a, testing::rtr_mask(QpType::kRc)), 0);
  EXPECT_EQ(qp->query().rq_psn, 0x345678u);
  EXPECT_EQ(qp->query().dest_qp_num, 0x000042u);
}

// --- posting in each state ---

class PostFixture : public QpStateFixture {
 protected:
  void SetUp() override { region_ = testing::register_region(engine_, 256, kAccessLocalWrite); }
  SendWqe a_send(uint64_t id, uint32_t flags = kSendSignaled) {
    return testing::send_wr(id, WrOpcode::kSend, {region_.sge(0, 16)}, flags);
  }
  RecvWqe a_recv(uint64_t id) { return testing::recv_wr(id, {region_.sge(64, 64)}); }
  std::vector<Completion> drain() {
    std::vector<Completion> out(64);
    out.resize(cq_.poll(64, out.data()));
    return out;
  }
  testing::Region region_;
};

TEST_F(PostFixture, GivenResetInitOrRtrExpectPostSendRefusedWithEinval) {
  for (QpType t : {QpType::kRc, QpType::kUc})
    for (QpState s : {S::kReset, S::kInit, S::kRtr}) {
      SCOPED_TRACE(name(t) + " " + to_string(s));
      auto qp = make_qp(t, s);
      const SendWqe w[2] = {a_send(1), a_send(2)};
      int bad = -1;
      EXPECT_EQ(qp->post_send(w, 2, &bad), EINVAL);
      EXPECT_EQ(bad, 0);
      EXPECT_TRUE(drain().empty());
    }
  EXPECT_EQ(sink_.count, 0u);
}

TEST_F(PostFixture, GivenResetExpectPostRecvRefusedAndInitOrRtrAccepted) {
  for (QpType t : {QpType::kRc, QpType::kUc}) {
    SCOPED_TRACE(name(t));
    auto qp = make_qp(t, S::kReset);
    int bad = -1;
    const RecvWqe r = a_recv(1);
    EXPECT_EQ(qp->post_recv(&r, 1, &bad), EINVAL);  // C10-43
    EXPECT_EQ(bad, 0);
    auto init = make_qp(t, S::kInit);
    EXPECT_EQ(testing::post(*init, a_recv(2)), 0);
    auto rtr = make_qp(t, S::kRtr);
    EXPECT_EQ(testing::post(*rtr, a_recv(3)), 0);
    EXPECT_TRUE(drain().empty());
  }
}

TEST_F(PostFixture, GivenErrorStateExpectEveryPostedWrFlushedInOrder) {
  for (QpType t : {QpType::kRc, QpType::kUc}) {
    SCOPED_TRACE(name(t));
    auto qp = make_qp(t, S::kErr);
    const SendWqe w[3] = {a_send(11), a_send(12, 0 /*unsignaled*/), a_send(13)};
    int bad = -1;
    EXPECT_EQ(qp->post_send(w, 3, &bad), 0);
    EXPECT_EQ(bad, -1);
    const RecvWqe r[2] = {a_recv(21), a_recv(22)};
    EXPECT_EQ(qp->post_recv(r, 2, &bad), 0);
    const auto wcs = drain();
    // Flushed WRs always complete, signaled or not (IBA 10.7.2.2).
    ASSERT_EQ(wcs.size(), 5u);
    const uint64_t ids[] = {11, 12, 13, 21, 22};
    for (size_t i = 0; i < wcs.size(); ++i) {
      EXPECT_EQ(wcs[i].wr_id, ids[i]);
      EXPECT_EQ(wcs[i].status, WcStatus::kWrFlushErr);
      EXPECT_EQ(wcs[i].qp_num, qp->qpn());
      EXPECT_EQ(wcs[i].opcode, i < 3 ? WcOpcode::kSend : WcOpcode::kRecv);
    }
  }
  EXPECT_EQ(sink_.count, 0u);
}

TEST_F(PostFixture, GivenWrsQueuedWhenQpIsMovedToErrorExpectThemFlushed) {
  auto qp = make_qp(QpType::kRc, S::kRtr);
  ASSERT_EQ(testing::post(*qp, a_recv(1)), 0);
  ASSERT_EQ(testing::post(*qp, a_recv(2)), 0);
  QpAttr a = attr(S::kRtr);
  a.qp_state = S::kErr;
  ASSERT_EQ(qp->modify(a, kQpState), 0);
  const auto wcs = drain();
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[0].status, WcStatus::kWrFlushErr);
  // ERR → RESET empties the queues without completions; RESET refuses posts.
  a.qp_state = S::kReset;
  ASSERT_EQ(qp->modify(a, kQpState), 0);
  EXPECT_EQ(testing::post(*qp, a_recv(3)), EINVAL);
  EXPECT_TRUE(drain().empty());
}

TEST_F(PostFixture, GivenResetFromRtsExpectQueuesEmptiedWithoutCompletions) {
  auto qp = make_qp(QpType::kRc, S::kRtr);
  ASSERT_EQ(testing::post(*qp, a_recv(1)), 0);
  QpAttr a = attr(S::kRtr);
  a.qp_state = S::kReset;
  ASSERT_EQ(qp->modify(a, kQpState), 0);
  EXPECT_TRUE(drain().empty());
  // Reconnecting gives an empty receive queue: a move to ERR flushes nothing.
  ASSERT_EQ(testing::bring_to(*qp, S::kRtr, attr(S::kReset)), 0);
  a.qp_state = S::kErr;
  ASSERT_EQ(qp->modify(a, kQpState), 0);
  EXPECT_TRUE(drain().empty());
}

TEST_F(PostFixture, GivenBadWorkRequestExpectEinvalAndIndexOfTheBadOne) {
  auto qp = make_qp(QpType::kRc, S::kErr);
  SendWqe w[3] = {a_send(1), a_send(2), a_send(3)};
  w[1].num_sge = 5;  // max_send_sge is 4
  int bad = -1;
  EXPECT_EQ(qp->post_send(w, 3, &bad), EINVAL);
  EXPECT_EQ(bad, 1);
  w[1] = a_send(2);
  w[2].opcode = static_cast<WrOpcode>(10);  // IBV_WR_TSO: not offered
  EXPECT_EQ(qp->post_send(w, 3, &bad), EINVAL);
  EXPECT_EQ(bad, 2);
}

TEST_F(PostFixture, GivenFullQueuesExpectEnomemAndIndexOfTheFirstWrLeftOut) {
  auto qp = make_qp(QpType::kRc, S::kRts);  // nobody acknowledges: WRs stay queued
  std::vector<SendWqe> sends;
  for (uint64_t i = 0; i < 20; ++i) sends.push_back(a_send(i));
  int bad = -1;
  EXPECT_EQ(qp->post_send(sends.data(), 20, &bad), ENOMEM);
  EXPECT_EQ(bad, 16);  // max_send_wr
  EXPECT_EQ(qp->post_send(sends.data(), 1, &bad), ENOMEM);
  EXPECT_EQ(bad, 0);
  std::vector<RecvWqe> recvs;
  for (uint64_t i = 0; i < 17; ++i) recvs.push_back(a_recv(i));
  EXPECT_EQ(qp->post_recv(recvs.data(), 17, &bad), ENOMEM);
  EXPECT_EQ(bad, 16);  // max_recv_wr
}

TEST_F(PostFixture, GivenInlineDataExpectItLimitedToMaxInlineData) {
  auto qp = make_qp(QpType::kRc, S::kRts);
  SendWqe w = testing::send_wr(1, WrOpcode::kSend, {region_.sge(0, 64)}, kSendInline);
  EXPECT_EQ(testing::post(*qp, w), 0);  // max_inline_data is 64
  w.sge[0].length = 65;
  EXPECT_EQ(testing::post(*qp, w), EINVAL);
}

TEST_F(PostFixture, GivenAnEmptyInlineSgeWithNoAddressExpectItPostedAndSkipped) {
  auto qp = make_qp(QpType::kRc, S::kRts);
  SendWqe w =
      testing::send_wr(1, WrOpcode::kSend, {region_.sge(0, 8), region_.sge(8, 8)}, kSendInline);
  w.sge[1].addr = 0;  // UCX sends its short messages so
  w.sge[1].length = 0;
  EXPECT_EQ(testing::post(*qp, w), 0);
}

TEST_F(PostFixture, GivenUnpolledFlushesExpectResetTakesThemAndLeavesOtherQpsAlone) {
  auto gone = make_qp(QpType::kRc, S::kRts);
  auto other = make_qp(QpType::kRc, S::kRts);
  ASSERT_EQ(testing::post(*gone, a_recv(1)), 0);
  ASSERT_EQ(testing::post(*other, a_recv(2)), 0);
  for (auto* qp : {gone.get(), other.get()}) {
    QpAttr err;
    err.qp_state = S::kErr;
    ASSERT_EQ(qp->modify(err, kQpState), 0);
  }
  QpAttr reset;
  reset.qp_state = S::kReset;
  ASSERT_EQ(gone->modify(reset, kQpState), 0);
  const std::vector<Completion> left = drain();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].wr_id, 2u);
  EXPECT_EQ(left[0].status, WcStatus::kWrFlushErr);
}

}  // namespace
}  // namespace ibemu::engine
