"""Sends datagrams from ibemu0 port 1 to ibemu1 port 1 that the receiver must
drop, one kind after the other: 3 with a wrong Q_Key, 2 with no receive
posted, 4 to a QP number nobody has, then 1 that arrives. test_ud.py checks
that `ibemu status` counted each drop under its cause."""
import sys
import time


sys.path.insert(0, __file__.rsplit("/", 1)[0])
from rc_ops_cases import poll_wcs  # noqa: E402
from ud_cases import QKEY, UdSide  # noqa: E402

a, b = UdSide("ibemu0"), UdSide("ibemu1")
ah = a.ah_to(b)
for _ in range(3):
    b.post_recv()
    a.send(ah, b.qp.qp_num, 8, qkey=QKEY ^ 1)
poll_wcs(a.cq, 3)
time.sleep(0.2)
for _ in range(3):  # drain the 3 receives left posted ...
    a.send(ah, b.qp.qp_num, 8)
poll_wcs(a.cq, 3)
poll_wcs(b.cq, 3)
for _ in range(2):  # ... so these 2 find none
    a.send(ah, b.qp.qp_num, 8)
poll_wcs(a.cq, 2)
for _ in range(4):
    a.send(ah, 0xabcdef, 8)
poll_wcs(a.cq, 4)
b.post_recv()
a.send(ah, b.qp.qp_num, 8)
poll_wcs(a.cq)
poll_wcs(b.cq)
print("sent")
