"""A UD echo pair for the route-cache test (test_ud.py).

  ud_echo.py server N   on ibemu0: prints "qpn Q lid L", answers N
                        datagrams, each to its sender, then prints how many
                        other processes' inbox rings it has mapped ("inboxes
                        K", its own excluded) and exits
  ud_echo.py client Q L on ibemu1: sends one datagram to QP Q at LID L and
                        waits for the answer
"""
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from pyverbs.addr import AH, AHAttr  # noqa: E402
from pyverbs.enums import IBV_WC_RECV  # noqa: E402
from rc_ops_cases import poll_wcs  # noqa: E402
from inbox_rings import inbox_rings_mapped as inbox_mappings  # noqa: E402
from ud_cases import UdSide  # noqa: E402


if sys.argv[1] == "server":
    side = UdSide("ibemu0")
    own = inbox_mappings()
    side.post_recv()
    print(f"qpn {side.qp.qp_num} lid {side.lid}", flush=True)
    answered = sent = 0
    while sent < int(sys.argv[2]):
        wc = poll_wcs(side.cq, 1, timeout=60)[0]
        assert wc.status == 0, wc.status
        if wc.opcode & IBV_WC_RECV:
            side.post_recv()
            side.send(AH(side.pd, attr=AHAttr(port_num=1, dlid=wc.slid)), wc.src_qp, 8)
            answered += 1
        else:
            sent += 1
    print(f"inboxes {inbox_mappings() - own}", flush=True)
else:
    side = UdSide("ibemu1")
    side.post_recv()
    ah = AH(side.pd, attr=AHAttr(port_num=1, dlid=int(sys.argv[3])))
    side.send(ah, int(sys.argv[2]), 8)
    wcs = poll_wcs(side.cq, 2)
    assert all(w.status == 0 for w in wcs), [w.status for w in wcs]
    print("answered", flush=True)
