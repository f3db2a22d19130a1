"""Async and completion events as a real HCA raises them: PORT_ACTIVE when
the subnet manager activates the ports, DEVICE_FATAL when the daemon (the
HCA's firmware, so to speak) goes away (seen by ibv_asyncwatch), and CQ
events through a completion channel's fd with poll() and epoll."""
import time


def wait_for(proc_lines, text, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(text in line for line in proc_lines):
            return True
        time.sleep(0.05)
    return False


def test_port_active_and_device_fatal_events(fresh_fabric):
    import threading
    f = fresh_fabric
    f.up(sm=False)
    watch = f.spawn(["stdbuf", "-oL", "ibv_asyncwatch", "-d", "ibemu0"])
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(iter(watch.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        assert wait_for(lines, "async event FD"), lines
        f.up()  # the SM moves the ports to ACTIVE
        assert wait_for(lines, "IBV_EVENT_PORT_ACTIVE (9), port 1"), lines
        assert wait_for(lines, "IBV_EVENT_PORT_ACTIVE (9), port 2"), lines
        f.down()
        assert wait_for(lines, "IBV_EVENT_DEVICE_FATAL (8)"), lines
    finally:
        watch.kill()
        watch.wait()


def test_completion_channel_with_poll_and_epoll(fabric):
    """Solicited-only and next-completion arming, events seen through poll()
    and epoll on the channel fd, no event when not armed."""
    from conftest import BUILD
    r = fabric.run([str(BUILD / "bin" / "comp_channel_probe")], timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
