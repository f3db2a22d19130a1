"""The daemon's `status` reply as Python objects, so that tests compare
attributes instead of digging through nested JSON whose shape they would
otherwise repeat in every assertion."""
from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class Counters:
    """A port's counters since the daemon started (closed contexts included)."""

    packets_in: int = 0
    bytes_in: int = 0
    packets_out: int = 0
    bytes_out: int = 0
    drops: Dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, j):
        return cls(j.get("packets_in", 0), j.get("bytes_in", 0), j.get("packets_out", 0),
                   j.get("bytes_out", 0), dict(j.get("drops", {})))

    def errors(self, ignore=()):
        """The drop causes that counted something, except those in `ignore`."""
        return {k: v for k, v in self.drops.items() if v and k not in ignore}


@dataclass
class Port:
    device: str
    port: int
    state: str
    lid: int
    sm_lid: int
    guid: int
    counters: Counters
    faults: Optional[dict] = None

    @property
    def name(self):
        """"ibemu0:1", the form every link argument accepts."""
        return f"{self.device}:{self.port}"


@dataclass
class Device:
    index: int
    name: str
    node_guid: int
    ports: List[Port]
    drops: Dict[str, int]


@dataclass
class QueuePair:
    """A QP as its program's provider reported it (`status` with details)."""

    qpn: int
    type: str       # "RC", "UC", "UD", "XRC_SEND", "XRC_RECV", "DCI", "DCT"
    state: str      # "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"
    port: int
    sq_psn: int     # the PSN of the next new packet it sends
    rq_psn: int     # the PSN it expects next
    dest_qpn: int   # connected QPs: the peer's QPN (0: none)
    dlid: int       # ... and LID
    send_wrs: int   # send WRs posted, not yet completed
    recv_wrs: int   # receive WRs posted to its own receive queue
    unacked: int    # packets sent and not yet acknowledged
    send_cq: int
    recv_cq: int
    pid: int = 0
    device: str = ""

    @classmethod
    def from_json(cls, j, pid=0, device=""):
        return cls(qpn=j["qpn"], type=j["type"], state=j["state"], port=j["port"],
                   sq_psn=j["sq_psn"], rq_psn=j["rq_psn"], dest_qpn=j["dest_qpn"],
                   dlid=j["dlid"], send_wrs=j["send_wrs"], recv_wrs=j["recv_wrs"],
                   unacked=j["unacked"], send_cq=j["send_cq"], recv_cq=j["recv_cq"],
                   pid=pid, device=device)

    def __str__(self):
        return (f"{self.device} QP {self.qpn:#x} ({self.type}, pid {self.pid}) {self.state} "
                f"SQ PSN {self.sq_psn:#x} RQ PSN {self.rq_psn:#x} sends {self.send_wrs} "
                f"unacked {self.unacked}")


@dataclass
class CompletionQueue:
    cqn: int
    size: int
    pending: int   # completions not yet polled
    overrun: bool


@dataclass
class MemoryRegion:
    lkey: int
    rkey: int
    pd: int
    iova: int
    length: int
    access: int    # IBV_ACCESS_* bits
    on_device: bool


@dataclass
class Context:
    """One opened device (ibv_open_device) of a program. `answered` is false
    when the program did not answer in time (stopped, hung): then the lists
    are empty."""

    context: int
    device: str
    answered: bool
    qps: List[QueuePair] = field(default_factory=list)
    cqs: List[CompletionQueue] = field(default_factory=list)
    mrs: List[MemoryRegion] = field(default_factory=list)


@dataclass
class Process:
    """A session of the daemon: a verbs program (role "provider"), the SM,
    a CLI or this plugin. `context_details` is filled from a status with
    details; `hidden` marks another user's program whose details the daemon
    does not show."""

    pid: int
    role: str
    contexts: int
    qps: int
    context_details: List[Context] = field(default_factory=list)
    hidden: bool = False

    @property
    def queue_pairs(self):
        return [qp for ctx in self.context_details for qp in ctx.qps]

    @property
    def alive(self):
        """Whether the pid still runs (a zombie counts as gone: it holds no
        descriptors, so its session is about to close)."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return False


def _context(pid, c):
    return Context(context=c["context"], device=c["device"], answered=c.get("answered", False),
                   qps=[QueuePair.from_json(q, pid, c["device"]) for q in c.get("qps", [])],
                   cqs=[CompletionQueue(x["cqn"], x["size"], x["pending"], x["overrun"])
                        for x in c.get("cqs", [])],
                   mrs=[MemoryRegion(m["lkey"], m["rkey"], m["pd"], m["iova"], m["length"],
                                     m["access"], m["on_device"]) for m in c.get("mrs", [])])


def _port(device, p):
    return Port(device=device, port=p["port"], state=p["state"], lid=p["lid"],
                sm_lid=p["sm_lid"], guid=int(p["port_guid"], 16),
                counters=Counters.from_json(p.get("counters", {})), faults=p.get("faults"))


def devices(status):
    return [Device(index=d["index"], name=d["name"], node_guid=int(d["node_guid"], 16),
                   ports=[_port(d["name"], p) for p in d.get("port_info", [])],
                   drops=dict(d.get("drops", {})))
            for d in status["devices"]]


def ports(status):
    return [p for d in devices(status) for p in d.ports]


def processes(status):
    return [Process(pid=p["pid"], role=p["role"], contexts=p["contexts"], qps=p["qps"],
                    context_details=[_context(p["pid"], c) for c in p.get("context_details", [])],
                    hidden=p.get("hidden", False))
            for p in status.get("processes", [])]


def queue_pairs(status):
    """Every QP of every program the status shows details of."""
    return [qp for proc in processes(status) for qp in proc.queue_pairs]


def describe(status):
    """A short text of a status reply for failure reports: what a person
    reads first (ports, their counters, who holds QPs)."""
    lines = [f"ibemud pid {status.get('pid')}  runtime {status.get('runtime_dir')}",
             f"subnet manager: {status.get('sm')}"]
    for d in devices(status):
        lines.append(f"{d.name}  node_guid {d.node_guid:#018x}  drops {d.drops}")
        for p in d.ports:
            c = p.counters
            lines.append(f"  port {p.port}  {p.state:6}  LID {p.lid:<4}  in {c.packets_in} "
                         f"out {c.packets_out}  errors {c.errors() or 'none'}"
                         + (f"  faults {p.faults}" if p.faults else ""))
    for proc in processes(status):
        lines.append(f"process pid {proc.pid} {proc.role}  contexts {proc.contexts}  "
                     f"QPs {proc.qps}")
        for ctx in proc.context_details:
            if not ctx.answered:
                lines.append(f"  context {ctx.context} on {ctx.device}: did not answer")
            lines.extend(f"  {qp}" for qp in ctx.qps)
    if status.get("fabric"):
        lines.append(f"fabric: {status['fabric']}")
    return "\n".join(lines)

