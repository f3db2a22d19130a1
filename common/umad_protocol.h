/*
 * How a umad file of no-kernel mode talks to ibemud (C, shared by the
 * preload shim and the daemon). docs/control-protocol.md describes it.
 *
 * The daemon listens on a SOCK_SEQPACKET socket per port, in the fake sysfs
 * tree at dev/infiniband/umadN (N counts ports in config order, as the
 * kernel numbers them). The first message on a new connection says what the
 * connection is:
 *   OPEN        the connection becomes the umad file: after the reply it
 *               carries exactly what a umad file reads and writes, one
 *               struct ib_user_mad (header + MAD) per message, both ways;
 *   REGISTER,   one request about the agents of an open file, named by the
 *   UNREGISTER  token its OPEN reply gave; answered, then closed.
 *   REGISTER_CM the open file becomes its port's endpoint for one process's
 *               communication management (class 0x07): the daemon hands
 *               it a block of communication IDs (reply.comm_id_base, the
 *               low 16 bits free) and delivers it every CM MAD whose
 *               receiver's communication ID lies in that block;
 *   CM_LISTEN,  the CM endpoint named by token receives the REQs and
 *   CM_UNLISTEN SIDR_REQs of the port for service_id (under service_mask).
 *   ISSM        the connection holds its port's IsSM capability bit
 *               (PortInfo:CapabilityMask) until it closes, as an open
 *               /dev/infiniband/issmN does; EBUSY while another holds it.
 * Registrations go over their own connection so that their replies never
 * queue behind MADs arriving on the file.
 */
#ifndef IBEMU_UMAD_PROTOCOL_H
#define IBEMU_UMAD_PROTOCOL_H

#include <stdint.h>

#define IBEMU_UMAD_OPEN 1u
#define IBEMU_UMAD_REGISTER 2u
#define IBEMU_UMAD_UNREGISTER 3u
#define IBEMU_UMAD_REGISTER_CM 4u
#define IBEMU_UMAD_CM_LISTEN 5u
#define IBEMU_UMAD_CM_UNLISTEN 6u
#define IBEMU_UMAD_ISSM 7u

struct ibemu_umad_request {
  uint32_t op;
  uint32_t agent_id; /* UNREGISTER */
  uint64_t token;    /* REGISTER, UNREGISTER */
  /* REGISTER: IB_USER_MAD_REGISTER_AGENT2's fields */
  uint32_t qpn;
  uint8_t mgmt_class;
  uint8_t mgmt_class_version;
  uint8_t rmpp_version;
  uint8_t reserved;
  uint64_t method_mask[2];
  /* CM_LISTEN, CM_UNLISTEN */
  uint64_t service_id;
  uint64_t service_mask;
};

struct ibemu_umad_reply {
  int32_t err; /* 0 or a positive errno */
  uint32_t agent_id;
  uint64_t token;        /* OPEN */
  uint32_t comm_id_base; /* REGISTER_CM */
  uint32_t reserved;
};

#endif /* IBEMU_UMAD_PROTOCOL_H */
