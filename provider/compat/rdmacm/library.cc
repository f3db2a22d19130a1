// The process-wide part of the user-space rdma_cm: the daemon session, the
// devices and their ports' addresses, each port's CM endpoint, and the worker
// thread that reads CM and SA MADs and runs the timers.
#include <arpa/inet.h>
#include <rdma/ib_user_mad.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/hex.h"
#include "common/mad/mad.h"
#include "common/runtime_paths.h"
#include "common/umad_client.h"
#include "provider/compat/rdmacm/cm_state.h"
#include "provider/compat/rdmacm/sockaddr_util.h"

namespace ibemu::rdmacm {

namespace {

std::once_flag g_once;
Library* g_library = nullptr;
int g_init_error = 0;

Gid parse_gid(const std::string& hex) {
  Gid g{};
  std::vector<uint8_t> bytes;
  if (from_hex(hex, &bytes) && bytes.size() == g.size())
    std::copy(bytes.begin(), bytes.end(), g.begin());
  return g;
}

}  // namespace

int Library::get(Library** out) {
  std::call_once(g_once, [] {
    auto* lib = new Library();
    g_init_error = lib->init();
    if (g_init_error == 0) g_library = lib;
  });
  if (!g_library) return g_init_error ? g_init_error : ENODEV;
  *out = g_library;
  return 0;
}

int Library::init() {
  if (control.connect(runtime_paths().socket()) != 0) return ENODEV;
  Json reply;
  if (control.request({{"op", "hello"}, {"role", "rdmacm"}, {"pid", getpid()}}, &reply) != 0 ||
      !reply.value("ok", false))
    return ENODEV;
  if (control.request({{"op", "ip_addresses"}}, &reply) != 0 || !reply.value("ok", false))
    return ENODEV;
  unsigned index = 0;
  for (const Json& a : reply["addresses"]) {
    PortAddress p;
    p.device = a.value("device", "");
    p.port = a.value("port", 0);
    p.umad_index = index++;
    if (a.contains("ipv4")) parse_address(a["ipv4"].get<std::string>(), &p.ipv4);
    p.ipv4_prefix = a.value("ipv4_prefix", 16);
    if (a.contains("ipv6")) parse_address(a["ipv6"].get<std::string>(), &p.ipv6);
    p.ipv6_prefix = a.value("ipv6_prefix", 64);
    p.gid = parse_gid(a.value("gid", ""));
    p.active = a.value("state", "") == "ACTIVE";
    ports.push_back(p);
  }

  int num = 0;
  ibv_device** list = ibv_get_device_list(&num);
  if (!list) return ENODEV;
  for (int i = 0; i < num; ++i) {
    Device d;
    d.name = ibv_get_device_name(list[i]);
    if (std::none_of(ports.begin(), ports.end(),
                     [&](const PortAddress& p) { return p.device == d.name; }))
      continue;
    d.context = ibv_open_device(list[i]);
    if (!d.context) continue;
    ibv_query_device(d.context, &d.attr);
    devices.push_back(d);
  }
  ibv_free_device_list(list);
  if (devices.empty()) return ENODEV;

  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = UINT64_MAX;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  std::thread([this] { worker(); }).detach();
  return 0;
}

int Library::device_index(const std::string& name) const {
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i].name == name) return int(i);
  return -1;
}

const PortAddress* Library::port_of(int device, uint8_t port_num) const {
  if (device < 0 || size_t(device) >= devices.size()) return nullptr;
  for (const PortAddress& p : ports)
    if (p.device == devices[device].name && p.port == port_num) return &p;
  return nullptr;
}

Endpoint* Library::endpoint(unsigned umad_index) {
  auto it = endpoints_.find(umad_index);
  if (it != endpoints_.end()) return it->second.get();

  std::string path = runtime_paths().sysfs() + "/dev/infiniband/umad" + std::to_string(umad_index);
  auto ep = std::make_unique<Endpoint>();
  ep->umad_index = umad_index;
  ep->fd = ibemu_umad_connect(path.c_str(), 0);
  if (ep->fd < 0) return nullptr;
  ibemu_umad_request req{};
  ibemu_umad_reply rep{};
  req.op = IBEMU_UMAD_OPEN;
  if (ibemu_umad_round_trip(ep->fd, &req, &rep) != 0 || rep.err) {
    ::close(ep->fd);
    errno = rep.err ? rep.err : errno;
    return nullptr;
  }
  ep->token = rep.token;

  ibemu_umad_request cm{};
  cm.op = IBEMU_UMAD_REGISTER_CM;
  int err = endpoint_request(*ep, cm, &rep);
  ep->cm_agent = rep.agent_id;
  ep->comm_id_base = rep.comm_id_base;
  if (!err) {
    ibemu_umad_request sa{};
    sa.op = IBEMU_UMAD_REGISTER;
    sa.qpn = 1;
    sa.mgmt_class = uint8_t(mad::MgmtClass::kSubnAdm);
    sa.mgmt_class_version = 2;
    err = endpoint_request(*ep, sa, &rep);
    ep->sa_agent = rep.agent_id;
  }
  if (err) {
    ::close(ep->fd);
    errno = err;
    return nullptr;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = umad_index;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, ep->fd, &ev);
  return (endpoints_[umad_index] = std::move(ep)).get();
}

int Library::endpoint_request(Endpoint& ep, ibemu_umad_request req, ibemu_umad_reply* reply) {
  // Requests about a file's agents go over connections of their own
  // (common/umad_protocol.h).
  std::string path =
      runtime_paths().sysfs() + "/dev/infiniband/umad" + std::to_string(ep.umad_index);
  int fd = ibemu_umad_connect(path.c_str(), 0);
  if (fd < 0) return errno;
  req.token = ep.token;
  int err = ibemu_umad_round_trip(fd, &req, reply) != 0 ? errno : reply->err;
  ::close(fd);
  return err;
}

int Library::send_mad(Endpoint& ep, bool sa, uint16_t dlid, const std::vector<uint8_t>& mad,
                      uint32_t timeout_ms, uint32_t retries) {
  std::vector<uint8_t> msg(sizeof(ib_user_mad_hdr) + mad.size());
  ib_user_mad_hdr hdr{};
  hdr.id = sa ? ep.sa_agent : ep.cm_agent;
  hdr.timeout_ms = timeout_ms;
  hdr.retries = retries;
  hdr.qpn = htonl(1);
  hdr.qkey = htonl(0x80010000);
  hdr.lid = htons(dlid);
  std::memcpy(msg.data(), &hdr, sizeof hdr);
  std::memcpy(msg.data() + sizeof hdr, mad.data(), mad.size());
  if (::send(ep.fd, msg.data(), msg.size(), MSG_NOSIGNAL) < 0) return errno;
  return 0;
}

uint32_t Library::new_comm_id(Endpoint& ep) {
  for (;;) {
    uint16_t low = ep.next_comm_id++;
    if (low == 0) continue;
    uint32_t id = ep.comm_id_base | low;
    if (!id_by_comm_id(id)) return id;
  }
}

CmId* Library::id_by_comm_id(uint32_t comm_id) {
  for (CmId* id : ids)
    if (id->local_comm_id == comm_id && id->state != IdState::kDestroying) return id;
  return nullptr;
}

void Library::remove_id(CmId* id) { ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end()); }

void Library::add_timer(Clock::duration after, std::function<void()> fire) {
  timers_.push_back({Clock::now() + after, std::move(fire)});
  wake();
}

void Library::add_timer(CmId* id, Clock::duration after, std::function<void(CmId*)> fire) {
  add_timer(after, [this, id, serial = id->serial, fire = std::move(fire)] {
    // Only a live id is dereferenced; the serial tells a new id that took
    // the freed one's address.
    if (std::find(ids.begin(), ids.end(), id) != ids.end() && id->serial == serial) fire(id);
  });
}

void Library::wake() {
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void Library::worker() {
  std::vector<uint8_t> buf(sizeof(ib_user_mad_hdr) + 4096);
  for (;;) {
    int timeout_ms = -1;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!timers_.empty()) {
        auto next =
            std::min_element(timers_.begin(), timers_.end(), [](const Timer& a, const Timer& b) {
              return a.when < b.when;
            })->when;
        auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now());
        timeout_ms = int(std::max<int64_t>(0, wait.count() + 1));
      }
    }
    epoll_event events[8];
    int n = epoll_wait(epoll_fd_, events, 8, timeout_ms);
    std::unique_lock<std::mutex> lock(mu);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == UINT64_MAX) {
        uint64_t v;
        (void)!::read(wake_fd_, &v, sizeof v);
        continue;
      }
      auto it = endpoints_.find(unsigned(events[i].data.u64));
      if (it == endpoints_.end()) continue;
      ssize_t len = ::recv(it->second->fd, buf.data(), buf.size(), MSG_DONTWAIT);
      if (len > 0) on_umad_message(*it->second, buf.data(), size_t(len));
    }
    // Timers fire in time order; a firing timer may add others.
    auto now = Clock::now();
    std::vector<Timer> due;
    auto split = std::partition(timers_.begin(), timers_.end(),
                                [&](const Timer& t) { return t.when > now; });
    due.assign(std::make_move_iterator(split), std::make_move_iterator(timers_.end()));
    timers_.erase(split, timers_.end());
    std::sort(due.begin(), due.end(),
              [](const Timer& a, const Timer& b) { return a.when < b.when; });
    for (Timer& t : due) t.fire();
  }
}

void Library::on_umad_message(Endpoint& ep, const uint8_t* msg, size_t len) {
  if (len < sizeof(ib_user_mad_hdr) + mad::kMadHeaderSize) return;
  ib_user_mad_hdr hdr;
  std::memcpy(&hdr, msg, sizeof hdr);
  const uint8_t* m = msg + sizeof hdr;
  size_t mlen = len - sizeof hdr;
  if (hdr.id == ep.sa_agent) {
    auto it = sa_waiters.find(mad::load_be32(m + 12));
    if (it == sa_waiters.end()) return;
    auto done = std::move(it->second.done);
    sa_waiters.erase(it);
    done(int(hdr.status), m, mlen);
    return;
  }
  if (hdr.status == 0 && mlen >= mad::kMadSize)
    on_cm_mad(*this, ep, ntohs(hdr.lid), m, mad::kMadSize);
}

}  // namespace ibemu::rdmacm
