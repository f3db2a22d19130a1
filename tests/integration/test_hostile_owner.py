"""An inbox ring's owner is not trusted by the processes that write into it
(docs/security.md). A program rewrites its own inbox ring (geometry, tail,
consumed count, futex words, slot states and lengths) while another
program of the host, and the daemon of the host for datagrams from another
host, send to it. The senders live on, their sends complete, and the
fabric serves other programs afterwards: the hostile owner loses only its
own packets."""
import re

from conftest import VERBS_CASES, free_tcp_port, run_pair
from hosts import meshed_lab, needs_namespaces

HOSTILE = ["/usr/bin/python3", str(VERBS_CASES / "hostile_owner.py")]
SECONDS = "4"  # of forging, while the sender goes on a second longer
SENDING = "5"


def start_owner(fabric, device):
    owner = fabric.spawn([*HOSTILE, "owner", device, SECONDS])
    first = owner.stdout.readline()
    m = re.match(r"qpn (\d+) lid (\d+)", first)
    assert m, first + owner.communicate()[0]
    return owner, m.group(1), m.group(2)


def pingpong_still_works(server_host, client_host=None):
    """A UD pingpong with its server on `server_host` (the host under
    attack) and its client there too, or on `client_host`."""
    port = free_tcp_port()
    base = ["ibv_ud_pingpong", "-g", "0", "-n", "20", "-p", str(port)]
    address = server_host.address if client_host else "localhost"
    server, client = run_pair(server_host, base + ["-d", "ibemu0"],
                              base + ["-d", "ibemu1", address], port,
                              client_fabric=client_host or server_host)
    for rc, out in (server, client):
        assert rc == 0 and "iters in" in out, out


def test_a_hostile_owner_costs_a_program_of_its_host_nothing(fabric):
    owner, qpn, lid = start_owner(fabric, "ibemu0")
    sender = fabric.run([*HOSTILE, "sender", "ibemu1", qpn, lid, SENDING], timeout=120)
    out = owner.communicate(timeout=60)[0]
    assert sender.returncode == 0 and re.search(r"sent [1-9]", sender.stdout), \
        sender.stdout + sender.stderr + fabric.logs()
    assert re.search(r"forged [1-9]", out), out
    pingpong_still_works(fabric)


@needs_namespaces
def test_a_hostile_owner_costs_the_daemon_delivering_from_another_host_nothing(tmp_path):
    with meshed_lab(tmp_path, 2) as lab:
        a, b = lab.hosts
        daemon = a.status()["pid"]
        owner, qpn, lid = start_owner(a, "ibemu0")
        sender = b.run([*HOSTILE, "sender", "ibemu0", qpn, lid, SENDING], timeout=120)
        out = owner.communicate(timeout=60)[0]
        assert sender.returncode == 0 and re.search(r"sent [1-9]", sender.stdout), \
            sender.stdout + sender.stderr + a.logs() + b.logs()
        assert re.search(r"forged [1-9]", out), out
        assert a.status()["pid"] == daemon  # the same daemon, alive and answering
        pingpong_still_works(a, client_host=b)
