#!/usr/bin/python3
"""`make bench-rxe` (and the end of `make kernel-bench`), inside the qemu
guest of tests/bench/kernel-guest.sh: the same perftest set on Soft-RoCE
(rxe0, on a veth) and on ibemu.ko's devices, in one boot, interleaved
(rxe, ibemu, rxe, ibemu), memcpy of the same size measured just before
each run. Bandwidths are printed as ratios to that memcpy, latencies in
microseconds; the last column is ibemu's figure over rxe's (for bandwidth
higher is better, for latency lower). rxe's two ends are rxe0 itself
(its loopback, which skips the veth), ibemu's are ibemu0 and ibemu1 (their
packets cross the emulated fabric). Figures only: nothing passes or fails."""
import statistics
import sys

import run_bench as rb

ROUNDS = 2
BANDWIDTH = [("ib_write_bw", 65536), ("ib_read_bw", 65536), ("ib_send_bw", 65536)]
LATENCY = [("ib_write_lat", 8), ("ib_send_lat", 8)]
HCAS = {"rxe": ("rxe0", "rxe0"), "ibemu": ("ibemu0", "ibemu1")}


def interleaved(measure):
    """{hca: [figure of each round]}, rounds interleaved between the HCAs."""
    figures = {hca: [] for hca in HCAS}
    for _ in range(ROUNDS):
        for hca, devices in HCAS.items():
            figures[hca].append(measure(devices))
    return figures


def summary(values):
    """The median of the rounds that worked, or None."""
    ok = [v for v in values if v is not None]
    return statistics.median(ok) if ok else None


def shown(value, fmt):
    return format(value, fmt) if value is not None else "failed"


def over(a, b):
    return f"{a / b:.2f}" if a is not None and b else "-"


def main():
    print(f"\n{'test':<14}{'size':>7}{'rxe x memcpy':>14}{'ibemu x memcpy':>16}{'ibemu/rxe':>11}")
    for tool, size in BANDWIDTH:
        def ratio_to_memcpy(devices, tool=tool, size=size):
            limit = rb.memcpy_mb_s([size])[size]
            args = ["-n", str(rb.iterations(size))]
            out = rb.perftest(None, tool, size, args, devices, prefix=())
            bw = rb.bandwidth(out, size)
            return bw / limit if bw else None
        f = {hca: summary(v) for hca, v in interleaved(ratio_to_memcpy).items()}
        print(f"{tool:<14}{size:>7}{shown(f['rxe'], '14.3f'):>14}{shown(f['ibemu'], '16.3f'):>16}"
              f"{over(f['ibemu'], f['rxe']):>11}")
    print(f"\n{'test':<14}{'size':>7}{'rxe us':>14}{'ibemu us':>16}{'ibemu/rxe':>11}")
    for tool, size in LATENCY:
        def typical_us(devices, tool=tool, size=size):
            lat = rb.latency(rb.perftest(None, tool, size, ["-n", "2000"], devices, prefix=()))
            return lat[0] if lat else None
        f = {hca: summary(v) for hca, v in interleaved(typical_us).items()}
        print(f"{tool:<14}{size:>7}{shown(f['rxe'], '14.1f'):>14}{shown(f['ibemu'], '16.1f'):>16}"
              f"{over(f['ibemu'], f['rxe']):>11}")


if __name__ == "__main__":
    sys.exit(main())
