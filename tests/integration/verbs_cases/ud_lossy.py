"""Sends N datagrams from ibemu0 port 1 to ibemu1 port 1 over a lossy link,
one at a time with a receive always posted, and prints "received K": what
got through. UD has no retransmission; test_faults.py compares K with the
drops `ibemu status` counted."""
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from rc_ops_cases import poll_wcs  # noqa: E402
from ud_cases import UdSide  # noqa: E402

count = int(sys.argv[1])
a, b = UdSide("ibemu0"), UdSide("ibemu1")
ah = a.ah_to(b)
for _ in range(16):
    b.post_recv()
received = 0


def drain():
    global received
    n, _ = b.cq.poll(16)
    for _ in range(n):
        received += 1
        b.post_recv()


for _ in range(count):
    a.send(ah, b.qp.qp_num, 64)
    poll_wcs(a.cq)  # a lost datagram completes at the sender all the same
    time.sleep(0.001)
    drain()
deadline = time.time() + 0.5
while time.time() < deadline:
    drain()
print(f"received {received}")
