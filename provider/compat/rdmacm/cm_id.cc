// rdma_cm_id's life: creation, binding to an address (and an IP port of the
// port space, reserved in the daemon for the whole host), listening,
// options, moving between channels and destruction.
#include <cstdlib>
#include <cstring>

#include "common/mad/cm.h"
#include "provider/compat/rdmacm/cm_state.h"
#include "provider/compat/rdmacm/connection.h"
#include "provider/compat/rdmacm/exports.h"
#include "provider/compat/rdmacm/sockaddr_util.h"

namespace ibemu::rdmacm {

/// Binds `id` to `addr`'s port (local address or wildcard) and reserves the
/// IP port. Caller holds the mutex.
int bind_locked(Library& lib, CmId* id, const sockaddr* addr) {
  if (id->bound) return EINVAL;
  if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6) return EAFNOSUPPORT;
  const PortAddress* port = nullptr;
  if (is_loopback(addr)) {
    for (const PortAddress& p : lib.ports)
      if (p.active) {
        port = &p;
        break;
      }
    if (!port) return EADDRNOTAVAIL;
  } else if (!is_any_address(addr)) {
    for (const PortAddress& p : lib.ports) {
      const sockaddr* mine =
          reinterpret_cast<const sockaddr*>(addr->sa_family == AF_INET ? &p.ipv4 : &p.ipv6);
      if (same_address(mine, addr)) port = &p;
    }
    if (!port) return EADDRNOTAVAIL;
  }
  Json reply;
  Json req = {{"op", "cm_bind"},
              {"ps", int(id->pub.ps)},
              {"ip", address_text(addr)},
              {"port", port_of(addr)}};
  if (lib.control.request(req, &reply) != 0) return ENODEV;
  if (!reply.value("ok", false)) return reply.value("errno", EADDRINUSE);
  id->bound = true;
  id->bound_port = reply.value("port", 0);
  std::memcpy(&id->pub.route.addr.src_storage, addr, address_length(addr));
  set_port(&id->pub.route.addr.src_addr, id->bound_port);
  if (port) attach_port(lib, id, port);
  return 0;
}

void attach_port(Library& lib, CmId* id, const PortAddress* port) {
  id->port = port;
  id->device = lib.device_index(port->device);
  id->pub.verbs = lib.devices[id->device].context;
  // Middleware (UCX) creates its QPs with id->pd: an id on a device has one.
  if (!id->pub.pd || id->pub.pd->context != id->pub.verbs)
    id->pub.pd = lib.devices[id->device].shared_pd();
  id->pub.port_num = port->port;
  id->endpoint = port->umad_index;
  std::memcpy(&id->pub.route.addr.addr.ibaddr.sgid, port->gid.data(), 16);
  id->pub.route.addr.addr.ibaddr.pkey = htons(id->pkey);
}

static void release_binding(Library& lib, CmId* id) {
  if (!id->bound) return;
  Json reply;
  lib.control.request({{"op", "cm_unbind"},
                       {"ps", int(id->pub.ps)},
                       {"ip", address_text(&id->pub.route.addr.src_addr)},
                       {"port", id->bound_port}},
                      &reply);
  id->bound = false;
}

// Asks the daemon to route (or stop routing) REQs for the id's ServiceID to
// this port's endpoint.
static int set_listening(Library& lib, Endpoint& ep, const CmId* id, bool listen) {
  ibemu_umad_request req{};
  ibemu_umad_reply rep{};
  req.op = listen ? IBEMU_UMAD_CM_LISTEN : IBEMU_UMAD_CM_UNLISTEN;
  req.service_id = id->service_id;
  req.service_mask = ~0ull;
  return lib.endpoint_request(ep, req, &rep);
}

static void stop_listening(Library& lib, CmId* id) {
  for (unsigned index : id->listen_endpoints)
    if (Endpoint* ep = lib.endpoint(index)) set_listening(lib, *ep, id, false);
  id->listen_endpoints.clear();
}

CmId* create_id(Library& lib, rdma_event_channel* channel, void* context, rdma_port_space ps,
                ibv_qp_type qp_type) {
  auto* id = new CmId();
  id->sync = channel == nullptr;
  id->channel = channel ? from_pub(channel) : new_channel(true);
  if (!id->channel) {
    delete id;
    return nullptr;
  }
  if (!channel) id->channel->owner = id;
  id->pub.channel = &id->channel->pub;
  id->pub.context = context;
  id->pub.ps = ps;
  id->pub.qp_type = qp_type;
  lib.add_id(id);
  return id;
}

}  // namespace ibemu::rdmacm

using namespace ibemu::rdmacm;

static ibv_qp_type qp_type_of(rdma_port_space ps) {
  return ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
}

extern "C" {

IBEMU_EXPORT int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context,
                                rdma_port_space ps) {
  if (!id) return fail(EINVAL);
  if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IB && ps != RDMA_PS_IPOIB)
    return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  std::lock_guard<std::mutex> lock(lib->mu);
  CmId* cm = create_id(*lib, channel, context, ps, qp_type_of(ps));
  if (!cm) return -1;
  *id = &cm->pub;
  return 0;
}

IBEMU_EXPORT int rdma_destroy_id(rdma_cm_id* pub) {
  if (!pub) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  CmId* id = from_pub(pub);
  std::unique_lock<std::mutex> lock(lib->mu);
  release_sync_event(*lib, id);
  forget_sa_queries(*lib, id);
  leave_all_groups(*lib, id);
  end_connection(*lib, id);
  stop_listening(*lib, id);
  release_binding(*lib, id);
  id->state = IdState::kDestroying;
  // Connect requests the program never took die with their listener.
  for (Event* e : id->channel->queue)
    if (event_type(e->pub.event) == RDMA_CM_EVENT_CONNECT_REQUEST &&
        from_pub(e->pub.listen_id) == id)
      destroy_unclaimed(*lib, from_pub(e->pub.id));
  drop_queued_events(id);
  for (CmId* other : lib->ids)
    if (other->listener == id) other->listener = nullptr;
  lib->cv.wait(lock, [&] { return id->events_acked >= id->events_reported; });
  lib->remove_id(id);
  rdma_freeaddrinfo(id->resolved_addrinfo);  // resolved, never taken
  if (id->channel->owner == id) delete_channel(id->channel);
  delete id;
  return 0;
}

IBEMU_EXPORT int rdma_bind_addr(rdma_cm_id* pub, sockaddr* addr) {
  if (!pub || !addr) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  std::lock_guard<std::mutex> lock(lib->mu);
  int err = bind_locked(*lib, from_pub(pub), addr);
  return err ? fail(err) : 0;
}

IBEMU_EXPORT int rdma_listen(rdma_cm_id* pub, int backlog) {
  (void)backlog;
  if (!pub) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  std::lock_guard<std::mutex> lock(lib->mu);
  CmId* id = from_pub(pub);
  if (id->state == IdState::kListen) return 0;
  if (!id->bound) {
    sockaddr_in any{};
    any.sin_family = AF_INET;
    if (int err = bind_locked(*lib, id, reinterpret_cast<sockaddr*>(&any))) return fail(err);
  }
  if (id->state != IdState::kIdle) return fail(EINVAL);
  id->service_id = ibemu::mad::cm::ip_service_id(id->pub.ps, id->bound_port);
  for (const PortAddress& p : lib->ports) {
    if (id->port && id->port != &p) continue;
    Endpoint* ep = lib->endpoint(p.umad_index);
    if (!ep) continue;
    if (int err = set_listening(*lib, *ep, id, true)) {
      stop_listening(*lib, id);
      return fail(err);
    }
    id->listen_endpoints.push_back(p.umad_index);
  }
  if (id->listen_endpoints.empty()) return fail(ENODEV);
  id->state = IdState::kListen;
  return 0;
}

IBEMU_EXPORT int rdma_migrate_id(rdma_cm_id* pub, rdma_event_channel* channel) {
  if (!pub) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  std::lock_guard<std::mutex> lock(lib->mu);
  CmId* id = from_pub(pub);
  if (id->sync && !channel) return fail(EINVAL);
  Channel* to = channel ? from_pub(channel) : new_channel(true);
  if (!to) return -1;
  // The event a synchronous id kept is acknowledged as it leaves its own
  // channel: on the new one the program acknowledges every event it takes.
  release_sync_event(*lib, id);
  if (!channel) to->owner = id;
  // Events of the id not yet taken move with it.
  Channel* from = id->channel;
  for (auto it = from->queue.begin(); it != from->queue.end();) {
    if (from_pub((*it)->pub.id) != id) {
      ++it;
      continue;
    }
    take_signal(from);
    to->queue.push_back(*it);
    signal_event(to);
    it = from->queue.erase(it);
  }
  if (from->owner == id) delete_channel(from);
  id->channel = to;
  id->sync = channel == nullptr;
  id->pub.channel = &to->pub;
  return 0;
}

IBEMU_EXPORT int rdma_set_option(rdma_cm_id* pub, int level, int optname, void* optval,
                                 size_t optlen) {
  if (!pub || !optval) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  std::lock_guard<std::mutex> lock(lib->mu);
  CmId* id = from_pub(pub);
  if (level == RDMA_OPTION_ID) {
    switch (optname) {
      case RDMA_OPTION_ID_TOS:
        if (optlen != sizeof(uint8_t)) return fail(EINVAL);
        id->tos = *static_cast<uint8_t*>(optval);
        return 0;
      case RDMA_OPTION_ID_REUSEADDR:
        if (optlen != sizeof(int)) return fail(EINVAL);
        if (id->bound) return fail(EINVAL);
        id->reuseaddr = *static_cast<int*>(optval) != 0;
        return 0;
      case RDMA_OPTION_ID_AFONLY:
        if (optlen != sizeof(int)) return fail(EINVAL);
        if (id->bound) return fail(EINVAL);
        id->afonly = *static_cast<int*>(optval) != 0;
        return 0;
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (optlen != sizeof(uint8_t)) return fail(EINVAL);
        id->ack_timeout = std::min<uint8_t>(*static_cast<uint8_t*>(optval), 31);
        id->ack_timeout_set = true;
        return 0;
    }
  } else if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH) {
    if (optlen < sizeof(ibv_path_data) || id->state != IdState::kAddrResolved) return fail(EINVAL);
    return set_path_from_data(id, static_cast<ibv_path_data*>(optval)) ? 0 : fail(EINVAL);
  }
  return fail(ENOSYS);
}

IBEMU_EXPORT __be16 rdma_get_src_port(rdma_cm_id* id) {
  return id ? htons(port_of(&id->route.addr.src_addr)) : 0;
}

IBEMU_EXPORT __be16 rdma_get_dst_port(rdma_cm_id* id) {
  return id ? htons(port_of(&id->route.addr.dst_addr)) : 0;
}

IBEMU_EXPORT ibv_context** rdma_get_devices(int* num_devices) {
  Library* lib;
  if (Library::get(&lib) != 0) {
    if (num_devices) *num_devices = 0;
    return static_cast<ibv_context**>(calloc(1, sizeof(ibv_context*)));
  }
  auto** list = static_cast<ibv_context**>(calloc(lib->devices.size() + 1, sizeof(ibv_context*)));
  if (!list) return nullptr;
  for (size_t i = 0; i < lib->devices.size(); ++i) list[i] = lib->devices[i].context;
  if (num_devices) *num_devices = int(lib->devices.size());
  return list;
}

IBEMU_EXPORT void rdma_free_devices(ibv_context** list) { free(list); }

}  // extern "C"
