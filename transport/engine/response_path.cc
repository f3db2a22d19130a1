#include "transport/engine/response_path.h"

#include <cstring>

namespace ibemu::engine {

void fill_address_headers(wire::PacketHeaders& h, const AddressVector& av,
                          const PortAddress& me) noexcept {
  h.lrh.set_vl(0);
  h.lrh.set_lver(0);
  h.lrh.set_sl(av.sl);
  h.lrh.set_dlid(av.dlid);
  h.lrh.set_slid(static_cast<uint16_t>(me.lid | (av.src_path_bits & ((1u << me.lmc) - 1))));
  h.has_grh = av.is_global;
  h.lrh.set_lnh(av.is_global ? wire::kLnhIbaGlobal : wire::kLnhIbaLocal);
  if (!av.is_global) return;
  h.grh.set_ip_ver(6);
  h.grh.set_tclass(av.traffic_class);
  h.grh.set_flow_label(av.flow_label);
  h.grh.set_next_hdr(0x1b);  // IBA 8.3.1: the next header is the BTH
  h.grh.set_hop_limit(av.hop_limit);
  uint8_t sgid[16];
  for (int i = 0; i < 8; ++i) {
    sgid[i] = static_cast<uint8_t>(me.subnet_prefix >> (56 - 8 * i));
    sgid[8 + i] = static_cast<uint8_t>(me.port_guid >> (56 - 8 * i));
  }
  h.grh.set_sgid(sgid);
  h.grh.set_dgid(av.dgid.data());
}

size_t write_response(uint8_t* buf, const ResponsePath& path, const PortAddress& me,
                      uint8_t rc_opcode, uint32_t psn, uint8_t syndrome, const uint8_t* payload,
                      uint32_t len, uint64_t atomic_orig, bool crcs) noexcept {
  wire::PacketHeaders h;
  fill_address_headers(h, path.av, me);
  // UC and XRC use RC's opcode layout under their own transport bits (IBA
  // 9.2.1, table 35; annex A14).
  h.bth.set_opcode(static_cast<uint8_t>(rc_opcode | path.transport << 5));
  h.bth.set_pkey(path.pkey);
  h.bth.set_dest_qp(path.dest_qp);
  h.bth.set_psn(psn);
  h.aeth.set_syndrome(syndrome);
  h.aeth.set_msn(path.msn);
  h.atomic_ack_eth.set_orig_data(atomic_orig);
  const size_t hlen = wire::write_headers(buf, h);
  // A READ response's payload comes from registered memory, which may be gone.
  if (len && !dma_read(buf + hlen, payload, len)) return 0;
  return wire::finalize_packet(buf, hlen, len, crcs);
}

}  // namespace ibemu::engine
