"""The owner of an inbox ring turned hostile, for test_hostile_owner.py.

  hostile_owner.py owner DEVICE SECONDS
      opens DEVICE with a UD QP, prints "qpn Q lid L", waits for a first
      datagram, then for SECONDS rewrites its own inbox ring under the
      producers' feet: the header's
      geometry, tail, consumed count and futex words, and slot state words
      claiming "being written" for ever, "ready" with lengths past the slot,
      positions from another lap. Prints "forged N" and exits.
  hostile_owner.py sender DEVICE Q L SECONDS
      sends datagrams to QP Q at LID L for SECONDS (each completes
      locally: UD has no acknowledgement) and prints "sent N".

The ring is the only memory of the owner that others write; whatever it
writes there may cost it its own packets, never a producer's life.
"""
import ctypes
import random
import struct
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from pyverbs.addr import AH, AHAttr  # noqa: E402
from rc_ops_cases import poll_wcs  # noqa: E402
from ud_cases import UdSide  # noqa: E402

HEADER = struct.Struct("<QII")  # magic, slot_size, slot_count
HEADER_BYTES = 4096  # the slots begin on the next page
WRITING, READY = 1, 2  # a slot state's phase: pos << 2 | phase


def own_inbox():
    """(address, length) of this process's inbox ring: the only one mapped
    by a program that has sent nothing."""
    with open("/proc/self/maps") as maps:
        rings = [line.split() for line in maps if "ibemu-inbox" in line]
    assert len(rings) == 1, rings
    start, end = (int(x, 16) for x in rings[0][0].split("-"))
    return start, end - start


def forge(addr, length, rng):
    magic, slot_size, slot_count = HEADER.unpack(ctypes.string_at(addr, HEADER.size))
    assert HEADER_BYTES + slot_size * slot_count <= length, (slot_size, slot_count, length)
    word = lambda offset, value: ctypes.memmove(addr + offset, struct.pack("<Q", value), 8)
    forged = 0
    deadline = time.time() + float(sys.argv[3])
    while time.time() < deadline:
        # Geometry, tail (64), consumed (128), sleeping and futex words (192).
        for offset in (0, 8, 64, 128, 192):
            word(offset, rng.getrandbits(64))
        for _ in range(64):
            i = rng.randrange(slot_count)
            base = HEADER_BYTES + i * slot_size
            lap = rng.getrandbits(40)
            state = rng.choice([lap << 2 | WRITING, lap << 2 | READY, rng.getrandbits(64),
                                (i + slot_count) << 2 | READY])
            word(base, state)
            ctypes.memmove(addr + base + 8, struct.pack("<I", rng.getrandbits(32)), 4)
        forged += 1
        time.sleep(0.001)
    # Put the header back as it was: the owner's own consumer may read it
    # on its way out; it must not matter to anyone else either way.
    ctypes.memmove(addr, HEADER.pack(magic, slot_size, slot_count), HEADER.size)
    return forged


if sys.argv[1] == "owner":
    side = UdSide(sys.argv[2])
    for i in range(16):
        side.post_recv(wr_id=i)
    print(f"qpn {side.qp.qp_num} lid {side.lid}", flush=True)
    # A datagram arrived: its producer has mapped the ring and checked it.
    # Only now does the owner turn.
    assert poll_wcs(side.cq, 1, timeout=30)[0].status == 0
    addr, length = own_inbox()
    print(f"forged {forge(addr, length, random.Random(26))}", flush=True)
else:
    side = UdSide(sys.argv[2])
    ah = AH(side.pd, attr=AHAttr(port_num=1, dlid=int(sys.argv[4])))
    sent = 0
    deadline = time.time() + float(sys.argv[5])
    while time.time() < deadline:
        side.send(ah, int(sys.argv[3]), 64, wr_id=sent)
        assert poll_wcs(side.cq, 1, timeout=10)[0].status == 0
        sent += 1
    print(f"sent {sent}", flush=True)
