#pragma once
// `ibemu capture`: packets crossing the host's ports written to pcap files
// (common/pcap_writer.h). Providers mirror each packet they send to the
// daemon's capture socket while a capture runs (the state page tells them);
// each capture keeps what passes its filter. A packet crosses a port when
// that port sent it or owns its destination LID.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/control_channel.h"
#include "common/pcap_writer.h"
#include "emulator-daemon/asio.h"
#include "emulator-daemon/subnet.h"

namespace ibemu {

struct CaptureFilter {
  std::optional<PortRef> port;
  std::optional<int> device;    // any port of it
  std::optional<uint32_t> qpn;  // the destination or the sending QP
  std::optional<uint16_t> lid;  // source or destination
};

struct CaptureRequest {
  std::string file;  // absolute
  CaptureFilter filter;
  uint64_t max_packets = 0;  // 0: until stopped
  uint64_t file_bytes = 0;   // ring of files when non-zero
  unsigned files = 1;
  uint32_t linktype = kLinktypeErf;
};

class CaptureService {
 public:
  /// `on_count_change` is told the number of captures running.
  CaptureService(boost::asio::io_context& io, const Subnet& subnet,
                 std::function<void(uint32_t)> on_count_change);
  ~CaptureService();

  /// Binds the capture socket; throws std::runtime_error when it cannot.
  void start(const std::string& socket_path);
  void stop();

  /// Starts a capture for a control session: 0 and its id, or an errno.
  int begin(uint64_t session, const CaptureRequest& req, uint64_t* id);
  /// Ends one; false if there is no such capture of that session.
  bool end(uint64_t session, uint64_t id);
  void end_all(uint64_t session);
  /// {"packets": N, "done": bool, "file": current file}, or null.
  Json describe(uint64_t session, uint64_t id) const;
  /// Records the packets already waiting in the capture socket: a provider's
  /// send returns once its packet is queued there, so after a program has
  /// exited a status or a stop counts every packet it sent.
  void drain();

  /// Whether any capture is running (worth building a packet for).
  bool active() const;
  /// A MAD as the QP0/QP1 packet that carries it (LRH, BTH, DETH, the MAD;
  /// VL15 for SMPs), recorded now as crossing `from`.
  void record_mad(PortRef from, uint16_t slid, uint16_t dlid, uint32_t sqpn, uint32_t dqpn,
                  const uint8_t* mad, size_t len);
  /// A packet that crossed `from` at `time_ns` (the providers' mirror, or
  /// a packet the daemon moved itself).
  void record(uint64_t time_ns, PortRef from, uint32_t src_qpn, const uint8_t* packet, size_t len);

 private:
  struct Capture {
    uint64_t session = 0;
    CaptureRequest req;
    std::unique_ptr<PcapWriter> writer;
    uint64_t packets = 0;
    bool done = false;
    std::string error;  // why the capture stopped before its end, if it did
  };
  /// Ends a capture whose file cannot be written: the packets it counted
  /// are not all in the file, which its client must learn.
  void fail(uint64_t id, Capture& c, int err);
  bool matches(const CaptureFilter& f, PortRef from, uint32_t src_qpn, const uint8_t* packet,
               size_t len) const;
  void receive();
  void publish_count();

  boost::asio::io_context& io_;
  const Subnet& subnet_;
  std::function<void(uint32_t)> on_count_change_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> socket_;
  std::string socket_path_;
  std::map<uint64_t, Capture> captures_;
  uint64_t next_id_ = 1;
};

}  // namespace ibemu
