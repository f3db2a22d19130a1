"""How many programs' inbox rings a process has mapped, from its
/proc/PID/maps: the measure of the route-cache tests (test_ud.py,
test_multihost.py)."""


def inbox_rings_mapped(pid="self"):
    with open(f"/proc/{pid}/maps") as maps:
        return len({line.split()[4] for line in maps if "ibemu-inbox" in line})
