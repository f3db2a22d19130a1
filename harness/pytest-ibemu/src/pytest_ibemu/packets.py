"""Reading the pcap files ibemud writes: IBA packets (LRH, optional GRH,
BTH and the extension headers a test asserts on), without tshark.

A capture holds ERF records of type InfiniBand (linktype 197, what
Wireshark decodes) or bare packets (linktype 247); each packet runs from
the first LRH byte to the VCRC. Opcode names are those of Wireshark's
InfiniBand dissector (RC_SEND_ONLY, RC_ACKNOWLEDGE, UD_SEND_ONLY, ...)."""
import struct
from dataclasses import dataclass
from typing import Optional

LINKTYPE_ERF = 197
LINKTYPE_INFINIBAND = 247
ERF_HEADER = 16
LRH_BYTES, GRH_BYTES, BTH_BYTES = 8, 40, 12
LNH_GLOBAL = 0x3

_OPERATIONS = [
    "SEND_FIRST", "SEND_MIDDLE", "SEND_LAST", "SEND_LAST_IMM", "SEND_ONLY", "SEND_ONLY_IMM",
    "RDMA_WRITE_FIRST", "RDMA_WRITE_MIDDLE", "RDMA_WRITE_LAST", "RDMA_WRITE_LAST_IMM",
    "RDMA_WRITE_ONLY", "RDMA_WRITE_ONLY_IMM", "RDMA_READ_REQUEST", "RDMA_READ_RESPONSE_FIRST",
    "RDMA_READ_RESPONSE_MIDDLE", "RDMA_READ_RESPONSE_LAST", "RDMA_READ_RESPONSE_ONLY",
    "ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE", "CMP_SWAP", "FETCH_ADD", "RESYNC", "SEND_LAST_INVAL",
    "SEND_ONLY_INVAL",
]
# Which operations each transport has (IBA 9.2, table 38).
_TRANSPORTS = {
    0x00: ("RC", set(range(21)) | {22, 23}),
    0x20: ("UC", set(range(12))),
    0x40: ("RD", set(range(22))),
    0x60: ("UD", {4, 5}),
    0xA0: ("XRC", set(range(21)) | {22, 23}),
}


def _opcode_names():
    names = {0x80: "CNP"}
    for base, (prefix, ops) in _TRANSPORTS.items():
        names.update({base | op: f"{prefix}_{_OPERATIONS[op]}" for op in ops})
    return names


OPCODE_NAMES = _opcode_names()
OPCODES = {name: code for code, name in OPCODE_NAMES.items()}
# RC/XRC responses that carry an AETH right after the BTH.
_AETH_OPERATIONS = {13, 15, 16, 17, 18}
_NAK_CODES = {0: "psn", 1: "invalid_request", 2: "remote_access", 3: "remote_operation",
              4: "invalid_rd_request"}


@dataclass
class Packet:
    """One captured packet, decoded as far as tests usually look."""

    time_ns: int
    raw: bytes
    sl: int
    dlid: int
    slid: int
    grh: bool
    opcode: int
    solicited: bool
    pkey: int
    dest_qp: int
    ack_req: bool
    psn: int
    syndrome: Optional[int] = None   # AETH, on acknowledgements and read responses
    msn: Optional[int] = None
    src_qp: Optional[int] = None     # DETH, on datagrams
    qkey: Optional[int] = None

    @property
    def opcode_name(self):
        return OPCODE_NAMES.get(self.opcode, f"UNKNOWN_{self.opcode:#04x}")

    @property
    def nak(self):
        """None for anything but a NAK; else "rnr", "psn" (sequence error),
        "invalid_request", "remote_access" or "remote_operation"."""
        if self.syndrome is None:
            return None
        kind = self.syndrome >> 5
        if kind == 0b001:
            return "rnr"
        if kind == 0b011:
            return _NAK_CODES.get(self.syndrome & 0x1F, "reserved")
        return None

    def summary(self):
        extra = f" NAK={self.nak}" if self.nak else ""
        return (f"{self.time_ns / 1e9:.6f} LID {self.slid} -> LID {self.dlid} "
                f"{self.opcode_name} QP={self.dest_qp:#08x} PSN={self.psn}{extra}")


def decode(time_ns, raw):
    """Decodes one IBA packet; None for what is not a BTH-carrying packet
    (raw or IP-over-LRH packets do not occur, but a test should not crash
    on one)."""
    if len(raw) < LRH_BYTES + BTH_BYTES:
        return None
    lnh = raw[1] & 0x3
    if lnh not in (0x2, LNH_GLOBAL):
        return None
    bth = LRH_BYTES + (GRH_BYTES if lnh == LNH_GLOBAL else 0)
    dlid, slid = struct.unpack_from(">H2xH", raw, 2)
    opcode, flags, pkey, qp, psn = struct.unpack_from(">BBHI I", raw, bth)
    p = Packet(time_ns=time_ns, raw=raw, sl=raw[1] >> 4, dlid=dlid, slid=slid,
               grh=lnh == LNH_GLOBAL, opcode=opcode, solicited=bool(flags & 0x80), pkey=pkey,
               dest_qp=qp & 0xFFFFFF, ack_req=bool(psn >> 31), psn=psn & 0xFFFFFF)
    _decode_extension(p, raw, bth + BTH_BYTES)
    return p


def _decode_extension(p, raw, off):
    """Fills in the AETH of RC/XRC responses and the DETH of datagrams."""
    transport, operation = p.opcode & 0xE0, p.opcode & 0x1F
    if transport in (0x00, 0xA0) and operation in _AETH_OPERATIONS and len(raw) >= off + 4:
        word = struct.unpack_from(">I", raw, off)[0]
        p.syndrome, p.msn = word >> 24, word & 0xFFFFFF
    elif transport == 0x60 and len(raw) >= off + 8:
        p.qkey, src = struct.unpack_from(">II", raw, off)
        p.src_qp = src & 0xFFFFFF


def read_pcap(path):
    """Every complete record of a pcap file, decoded. A record the daemon
    is still writing (a running capture) is left out, not an error."""
    data = open(path, "rb").read()
    if len(data) < 24:
        return []
    magic = struct.unpack_from("<I", data)[0]
    nanos = magic == 0xA1B23C4D
    linktype = struct.unpack_from("<I", data, 20)[0]
    skip = ERF_HEADER if linktype == LINKTYPE_ERF else 0
    off, packets = 24, []
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack_from("<IIII", data, off)
        if off + 16 + incl > len(data):
            break
        time_ns = sec * 1_000_000_000 + (frac if nanos else frac * 1000)
        packet = decode(time_ns, data[off + 16 + skip: off + 16 + incl])
        if packet:
            packets.append(packet)
        off += 16 + incl
    return packets


def select(packets, opcode=None, dest_qp=None, slid=None, dlid=None, nak=None):
    """The packets that match every criterion given; `opcode` is a name
    (or a list of names, or a prefix ending in "*": "RC_RDMA_WRITE_*"),
    `nak` True for any NAK or a kind ("rnr", "psn")."""
    def wanted(p):
        return (_opcode_matches(p, opcode)
                and (dest_qp is None or p.dest_qp == dest_qp)
                and (slid is None or p.slid == slid)
                and (dlid is None or p.dlid == dlid)
                and (nak is None or (p.nak is not None if nak is True else p.nak == nak)))
    return [p for p in packets if wanted(p)]


def _opcode_matches(packet, opcode):
    if opcode is None:
        return True
    if isinstance(opcode, (list, tuple, set)):
        return any(_opcode_matches(packet, o) for o in opcode)
    if isinstance(opcode, int):
        return packet.opcode == opcode
    if opcode.endswith("*"):
        return packet.opcode_name.startswith(opcode[:-1])
    if opcode not in OPCODES:
        raise ValueError(f"unknown opcode name {opcode!r} (e.g. RC_SEND_ONLY, RC_ACKNOWLEDGE)")
    return packet.opcode_name == opcode
