#pragma once
// What the files of the user-space rdma_cm call of each other.
#include "common/mad/sa.h"
#include "provider/compat/rdmacm/cm_state.h"

namespace ibemu::rdmacm {

// cm_id.cc
CmId* create_id(Library& lib, rdma_event_channel* channel, void* context, rdma_port_space ps,
                ibv_qp_type qp_type);
/// 0 or an errno. Caller holds the mutex.
int bind_locked(Library& lib, CmId* id, const sockaddr* addr);
/// Ties the id to a port: its device context, port number and source GID.
void attach_port(Library& lib, CmId* id, const PortAddress* port);
/// Frees an id made for a connect request the program never took: the
/// requester is rejected.
void destroy_unclaimed(Library& lib, CmId* id);

// address.cc
using SaCallback = std::function<void(int status, const uint8_t* mad, size_t len)>;
/// Sends an SA request about `record` from the id's port to its SM; `done`
/// runs with the mutex held with the response, or a status (ETIMEDOUT). 0 or
/// an errno.
int sa_query(Library& lib, CmId* id, mad::Method method, mad::SaAttr attr, uint64_t mask,
             const uint8_t* record, size_t record_len, int timeout_ms, SaCallback done);
/// Drops the id's SA requests still unanswered: an id destroyed while its
/// route (or multicast join) is being resolved hears nothing more.
void forget_sa_queries(Library& lib, CmId* id);
/// Fills the id's path from an ibv_path_data (RDMA_OPTION_IB_PATH).
bool set_path_from_data(CmId* id, const ibv_path_data* data);

// addrinfo_resolution.cc
/// rdma_getaddrinfo with RAI_SA: the IB service `service` as the SA of the
/// first active port that knows it gives it; 0 or -1 with errno (ENOENT when
/// none does). Takes the mutex.
int getaddrinfo_from_sa(Library& lib, const char* service, rdma_addrinfo** res);

// connection.cc
/// Ends what the id has with its peer as it is destroyed: a DREQ for a
/// connection, a REJ for a request not accepted.
void end_connection(Library& lib, CmId* id);

// multicast.cc
void leave_all_groups(Library& lib, CmId* id);

}  // namespace ibemu::rdmacm
