#pragma once
// The host's links to the other hosts of the subnet: one UDP socket, and
// one inter-host link (a switch port, "uplink") per peer daemon.
//
// - Providers hand packets for LIDs of other hosts to the uplink ring (an
//   inbox ring this class consumes); the send thread picks each packet's
//   link from the switch's forwarding table (set_routes) and packs packets
//   into datagrams per peer (fabric_datagram.h).
// - The receive thread splits datagrams and puts data packets into the
//   destination process's inbox (fabric_delivery.h); QP0/QP1 packets (MADs)
//   go to the daemon's thread (Events::management).
// - Hellos, on the daemon's thread, tell peers we are alive; a peer silent
//   for fabric.dead_ms is down. In seed mode hellos also carry the peers a
//   host knows, so members find each other through the seed.
//
// Datagrams from addresses that are not peers are dropped and counted. The
// network may lose, duplicate or reorder datagrams: the IBA transport above
// copes (RC retransmits, UC and UD drop), nothing here retries.
#include <netinet/in.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "emulator-daemon/asio.h"
#include "emulator-daemon/datagram_auth.h"
#include "transport/link/shm_ring.h"

namespace ibemu {

class FabricDelivery;

class FabricLink {
 public:
  struct Events {
    /// Inter-host link `uplink` came up or went down.
    std::function<void(int uplink, bool up)> link_change;
    /// A packet to QP0 or QP1 that came in by `uplink`.
    std::function<void(int uplink, std::vector<uint8_t> packet)> management;
    /// What this host adds to its hellos (a JSON object's fields).
    std::function<nlohmann::json()> hello_fields;
    /// A hello from the peer on `uplink`, with those fields.
    std::function<void(int uplink, const nlohmann::json& hello)> hello_received;
  };

  FabricLink(boost::asio::io_context& io, const FabricConfig& cfg, uint64_t switch_guid,
             std::string runtime_dir, Events events);
  ~FabricLink();
  FabricLink(const FabricLink&) = delete;
  FabricLink& operator=(const FabricLink&) = delete;

  /// Binds the socket and starts the threads and hellos; throws
  /// std::runtime_error when the socket cannot be bound or a peer address
  /// does not resolve. The daemon's control socket must be serving.
  void start();
  void stop();

  /// The ring providers put packets for other hosts into.
  int uplink_ring_fd() const { return ring_.fd(); }
  bool any_up() const;
  /// Sends one packet by `uplink` now (the daemon's thread: MADs).
  void send_management(int uplink, const std::vector<uint8_t>& packet);
  /// The inter-host link for each unicast LID (-1: none), from the switch's
  /// forwarding table.
  void set_routes(const std::vector<int8_t>& by_lid);
  /// The peers, their state and counters, for `ibemu status`.
  nlohmann::json describe() const;
  /// Pulls or plugs the cable to the peer at `address` (IP, or IP:port):
  /// pulled, the link carries nothing either way and hellos stop, so the
  /// peer sees it go down too. Its uplink, or -1 for no such peer.
  int set_cable(const std::string& address, bool plugged);

 private:
  struct Peer {
    sockaddr_in addr{};
    std::string name;                 // a.b.c.d:port
    bool self = false;                // our own address (a seed that is this host)
    std::atomic<bool> pulled{false};  // `ibemu fault link host:ADDRESS down`
    uint64_t guid = 0;                // its switch's GUID, from its hellos
    std::atomic<bool> up{false};
    std::atomic<int64_t> last_heard_ns{0};
    std::atomic<uint64_t> tx_packets{0}, tx_datagrams{0}, rx_packets{0}, rx_datagrams{0};
    std::atomic<uint64_t> tx_drops{0};     // no route up: the link is down
    std::atomic<uint64_t> send_errors{0};  // sendto failed (buffer full, unreachable)
  };

  int add_peer(const sockaddr_in& addr);  // its uplink, or -1 (table full)
  bool send_to(Peer& p, const uint8_t* data, size_t len);
  int peer_of(const sockaddr_in& addr) const;
  int peer_count() const { return peer_count_.load(std::memory_order_acquire); }
  void hello_tick();
  void on_hello(const sockaddr_in& from, const std::string& text);
  void set_up(int uplink, bool up);
  void send_loop();
  void receive_loop();
  void receive_datagram(const sockaddr_in& from, const uint8_t* data, size_t len);

  boost::asio::io_context& io_;
  const FabricConfig cfg_;
  const uint64_t switch_guid_;
  const std::string runtime_dir_;
  Events events_;
  const bool accept_joins_;  // seed mode: hosts that say hello become peers

  int fd_ = -1;
  link::ShmRing ring_;
  std::unique_ptr<Peer[]> peers_;  // by uplink; only appended to
  std::atomic<int> peer_count_{0};
  mutable std::mutex peers_mutex_;  // adding peers, by_addr_
  std::map<uint64_t, int> by_addr_;
  std::unique_ptr<std::atomic<int8_t>[]> routes_;  // by DLID

  fabric::DatagramAuth auth_;  // fabric.secret_file
  std::atomic<uint64_t> unknown_source_drops_{0};
  std::atomic<uint64_t> unauthenticated_drops_{0};
  std::atomic<uint64_t> malformed_{0};
  // When the receive thread last found its socket empty: everything that had
  // arrived by then was heard. A peer's silence is measured up to there.
  std::atomic<int64_t> heard_all_until_ns_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> started_{false};
  std::thread sender_, receiver_;
  std::mutex delivery_mutex_;  // the receive thread replaces it, stop() ends it
  std::unique_ptr<FabricDelivery> delivery_;
  boost::asio::steady_timer hello_timer_;
};

}  // namespace ibemu
