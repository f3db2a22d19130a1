"""A client of ibemud's control protocol (docs/control-protocol.md).

The fixtures talk to the daemon directly rather than through the `ibemu`
command: one connection answers in milliseconds where a command costs a
process start, and a capture lives exactly as long as the session that
started it, which only a held connection can express."""
import array
import json
import os
import socket

MAX_MESSAGE = 1 << 20
MAX_FDS = 8


class ControlError(OSError):
    """A request the daemon refused: carries its errno and message, so a test
    can tell "no such device" (ENODEV) from "not allowed" (EPERM)."""

    def __init__(self, op, reply):
        super().__init__(reply.get("errno", 0), f"{op}: {reply.get('error', 'refused')}")
        self.op = op
        self.reply = reply


def _received_fds(ancillary):
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return list(fds)


def _read_reply(data, ancillary):
    """The reply in a record, or, for a long one ({"reply_in_fd": N}), in
    the sealed memfd that came last. Descriptors that came with it are
    closed: none of the requests this client makes needs them, and leaking
    them would keep rings mapped."""
    fds = _received_fds(ancillary)
    try:
        reply = json.loads(data)
        if isinstance(reply, dict) and "reply_in_fd" in reply and fds:
            size = reply["reply_in_fd"]
            text = b""
            while len(text) < size:
                chunk = os.pread(fds[-1], size - len(text), len(text))
                if not chunk:
                    break
                text += chunk
            reply = json.loads(text)
        return reply
    finally:
        for fd in fds:
            os.close(fd)


def link_selector(link):
    """The protocol's port selection for `link`: None (every port), a device
    ("ibemu0" or 0), "DEVICE:PORT", a (device, port) pair, or "host:ADDRESS"
    (the cable to another host's switch)."""
    if link is None:
        return {}
    if isinstance(link, tuple):
        device, port = link
        return {"device": device, "port": int(port)}
    if isinstance(link, int):
        return {"device": link}
    if link.startswith("host:"):
        return {"peer": link[len("host:"):]}
    device, sep, port = link.partition(":")
    return {"device": device, "port": int(port)} if sep else {"device": device}


class Control:
    """One session with the daemon of a runtime directory."""

    def __init__(self, runtime_dir, role="cli", timeout=30.0):
        self.path = os.path.join(os.fspath(runtime_dir), "ibemud.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(self.path)
            self.hello = self.request("hello", role=role, pid=os.getpid())
        except BaseException:
            self.sock.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.sock.close()

    def request(self, op, **fields):
        """Sends one request and returns its reply; a refusal raises
        ControlError so that no caller can forget to look at "ok"."""
        try:
            self.sock.send(json.dumps({"op": op, **fields}).encode())
        except (BrokenPipeError, ConnectionResetError):
            pass  # a refused connection: the daemon's answer waits to be read
        try:
            data, ancillary, _, _ = self.sock.recvmsg(MAX_MESSAGE,
                                                      socket.CMSG_SPACE(4 * MAX_FDS))
        except ConnectionResetError:
            # Reported once, ahead of an answer the daemon sent before it
            # closed (a refused connection).
            data, ancillary, _, _ = self.sock.recvmsg(MAX_MESSAGE,
                                                      socket.CMSG_SPACE(4 * MAX_FDS))
        if not data:
            _read_reply(b"{}", ancillary)
            raise ConnectionError(f"ibemud closed the connection ({self.path})")
        reply = _read_reply(data, ancillary)
        if not reply.get("ok"):
            raise ControlError(op, reply)
        return reply

    # The operations the fixtures use, named as in the protocol.

    def status(self):
        return self.request("status")

    def devices(self):
        return self.request("devices")["devices"]

    def fault_set(self, link=None, **faults):
        """`faults` as the protocol takes them: drop/duplicate/reorder in
        percent, delay_us, jitter_us, rate_mbps, seed."""
        return self.request("fault_set", **link_selector(link), **faults)

    def fault_clear(self, link=None):
        return self.request("fault_clear", **link_selector(link))

    def link(self, link, up):
        return self.request("link", **link_selector(link), up=bool(up))

    def fault_nak(self, device, qpn, kind="rnr", count=1):
        return self.request("fault_nak", device=device, qpn=int(qpn), kind=kind, count=count)

    def capture_start(self, file, **filters):
        return self.request("capture_start", file=os.fspath(file), **filters)["id"]

    def capture_status(self, capture_id):
        return self.request("capture_status", id=capture_id)

    def capture_stop(self, capture_id):
        return self.request("capture_stop", id=capture_id)
