"""A packet capture of one fabric, as a test sees it: started and stopped
through its own control session (the daemon ends a capture with the session
that started it, so a crashed test cannot leave one running), read back
from the pcap file the daemon writes."""
from pathlib import Path

from . import packets as pcap
from .control import Control, link_selector


class Capture:
    """A running or finished capture. `packets()` reads what the daemon has
    written so far; after the `with` block (or `stop()`) that is everything."""

    def __init__(self, runtime_dir, path: Path, link=None, qpn=None, lid=None, count=None):
        self.path = Path(path)
        self.packets_written = None
        self._control = Control(runtime_dir)
        try:
            self._id = self._control.capture_start(self.path, **self._filters(link, qpn, lid,
                                                                               count))
        except BaseException:
            self._control.close()
            raise

    @staticmethod
    def _filters(link, qpn, lid, count):
        filters = link_selector(link)
        if "peer" in filters:
            raise ValueError("a capture selects a device or a port, not a host link")
        for key, value in (("qpn", qpn), ("lid", lid), ("count", count)):
            if value is not None:
                filters[key] = value
        return filters

    @property
    def running(self):
        return self._control is not None

    def stop(self):
        """Ends the capture (the daemon closes the file); idempotent."""
        if self._control is None:
            return
        try:
            self.packets_written = self._control.capture_stop(self._id).get("packets")
        except OSError:
            pass  # the daemon is gone: the file holds what it wrote
        finally:
            self._control.close()
            self._control = None

    def packets(self, opcode=None, **criteria):
        """Decoded packets, filtered as `packets.select` does: `opcode` by
        Wireshark's name ("RC_SEND_ONLY", "RC_RDMA_WRITE_*"), `dest_qp`,
        `slid`, `dlid`, `nak` (True or "rnr"/"psn")."""
        if not self.path.exists():
            return []
        return pcap.select(pcap.read_pcap(self.path), opcode=opcode, **criteria)

    def opcodes(self):
        """The opcode names seen, in order of first appearance."""
        return list(dict.fromkeys(p.opcode_name for p in self.packets()))

    def summary(self, last=30):
        """The last packets as one line each, for a failure report."""
        found = self.packets()
        lines = [p.summary() for p in found[-last:]]
        head = f"capture {self.path}: {len(found)} packets" + (
            f", last {len(lines)}:" if len(found) > last else ":")
        return "\n".join([head, *lines])
