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
class Process:
    """A session of the daemon: a verbs program (role "provider"), the SM,
    a CLI or this plugin."""

    pid: int
    role: str
    contexts: int
    qps: int

    @property
    def alive(self):
        """Whether the pid still runs (a zombie counts as gone: it holds no
        descriptors, so its session is about to close)."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return False


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
    return [Process(pid=p["pid"], role=p["role"], contexts=p["contexts"], qps=p["qps"])
            for p in status.get("processes", [])]


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
    if status.get("fabric"):
        lines.append(f"fabric: {status['fabric']}")
    return "\n".join(lines)

