// Authenticated datagrams between hosts (emulator-daemon/datagram_auth.h).
#include "emulator-daemon/datagram_auth.h"

#include <gtest/gtest.h>

#include <vector>

#include "emulator-daemon/fabric_datagram.h"

namespace ibemu::fabric {
namespace {

constexpr uint64_t kPeer = 0x0a00000248530000;  // 10.0.0.2:18515

std::vector<uint8_t> packets_datagram() {
  PacketBatch b(1000);
  const std::vector<uint8_t> packet(64, 0x5a);
  EXPECT_TRUE(b.add(packet.data(), packet.size()));
  return {b.data(), b.data() + b.size()};
}

std::vector<uint8_t> signed_by(DatagramAuth& auth, const std::vector<uint8_t>& d) {
  std::vector<uint8_t> out(d.size() + kAuthTrailer);
  out.resize(auth.sign(d.data(), d.size(), out.data()));
  return out;
}

TEST(DatagramAuth, GivenTheSameSecretExpectTheDatagramAcceptedOnceWithTheTrailerRemoved) {
  DatagramAuth sender("a shared secret of the fabric"), receiver("a shared secret of the fabric");
  const auto plain = packets_datagram();
  auto d = signed_by(sender, plain);
  ASSERT_EQ(d.size(), plain.size() + kAuthTrailer);
  size_t len = d.size();
  ASSERT_TRUE(receiver.verify(d.data(), &len, kPeer));
  EXPECT_EQ(len, plain.size());
  EXPECT_EQ(datagram_kind(d.data(), len), Kind::kPackets);
  // The same bytes again are a replay.
  len = d.size();
  EXPECT_FALSE(receiver.verify(d.data(), &len, kPeer));
}

TEST(DatagramAuth, GivenATamperedDatagramOrAnotherSecretExpectItRefused) {
  DatagramAuth sender("a shared secret of the fabric"), receiver("a shared secret of the fabric"),
      stranger("someone else's secret value");
  const auto plain = packets_datagram();
  for (size_t i = 0; i < plain.size() + kAuthTrailer; i += 7) {
    auto d = signed_by(sender, plain);
    d[i] ^= 0x20;
    size_t len = d.size();
    EXPECT_FALSE(receiver.verify(d.data(), &len, kPeer)) << "byte " << i;
  }
  auto forged = signed_by(stranger, plain);
  size_t len = forged.size();
  EXPECT_FALSE(receiver.verify(forged.data(), &len, kPeer));
  // Unsigned: refused where a secret is configured, accepted where none is.
  len = plain.size();
  EXPECT_FALSE(receiver.verify(plain.data(), &len, kPeer));
  DatagramAuth open;
  EXPECT_TRUE(open.verify(plain.data(), &len, kPeer));
  auto d = signed_by(sender, plain);
  len = d.size();
  EXPECT_FALSE(open.verify(d.data(), &len, kPeer));  // flagged, but nothing to check it with
}

TEST(DatagramAuth, GivenReorderedDatagramsExpectEachAcceptedOnceWithinTheWindow) {
  DatagramAuth sender("a shared secret of the fabric"), receiver("a shared secret of the fabric");
  const auto plain = packets_datagram();
  std::vector<std::vector<uint8_t>> sent;
  for (int i = 0; i < 100; ++i) sent.push_back(signed_by(sender, plain));
  // The newest first, then the 63 before it in reverse: all new to the receiver.
  for (int i = 99; i >= 36; --i) {
    size_t len = sent[size_t(i)].size();
    EXPECT_TRUE(receiver.verify(sent[size_t(i)].data(), &len, kPeer)) << i;
  }
  for (int i = 99; i >= 36; --i) {  // and none of them twice
    size_t len = sent[size_t(i)].size();
    EXPECT_FALSE(receiver.verify(sent[size_t(i)].data(), &len, kPeer)) << i;
  }
  size_t len = sent[0].size();
  EXPECT_FALSE(receiver.verify(sent[0].data(), &len, kPeer));  // older than the window
  // Another sender has its own window.
  len = sent[0].size();
  EXPECT_TRUE(receiver.verify(sent[0].data(), &len, kPeer + 1));
}

}  // namespace
}  // namespace ibemu::fabric
