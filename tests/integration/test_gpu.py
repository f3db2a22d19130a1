"""GPU memory as RDMA memory (docs/gpu.md). On any machine: a CPU dma-buf
registered with ibv_reg_dmabuf_mr. With a GPU: tests/programs/gpu_rdma moves
data between two processes' GPU and host buffers by RDMA WRITE, READ and
SEND, 1 byte to 64 MiB, through ibv_reg_mr and ibv_reg_dmabuf_mr, checks
every byte with kernels on the GPU and a bad rkey on a GPU region. It needs
a CUDA toolkit to build and a GPU to run: without either these tests are
skipped and say why."""
import re
import shutil
import subprocess
import time

import pytest

from conftest import BUILD

GPU_RDMA = BUILD / "bin" / "gpu_rdma"


def gpu_missing():
    if not GPU_RDMA.exists():
        return "gpu_rdma was not built: no CUDA toolkit was found at build time"
    if not shutil.which("nvidia-smi"):
        return "no NVIDIA driver on this machine (nvidia-smi not found)"
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    if r.returncode != 0 or "GPU" not in r.stdout:
        return "no GPU on this machine"
    return None


needs_gpu = pytest.mark.skipif(gpu_missing() is not None, reason=str(gpu_missing()))


def test_cpu_dmabuf_is_written_through_its_fd(fabric):
    r = fabric.run([str(BUILD / "bin" / "dmabuf_probe")], timeout=60)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    assert "CPU dma-buf at offset 4096: ok" in r.stdout and "EBADF: ok" in r.stdout, r.stdout


@needs_gpu
def test_gpu_memory_through_write_read_send_and_dmabuf(fabric):
    r = fabric.run([str(GPU_RDMA)], timeout=600)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{fabric.logs()}"
    assert "gpu_rdma: all passed" in r.stdout, r.stdout
    for size in (1, 4096, 1 << 20, 64 << 20):
        assert re.search(rf"^{size} bytes: .*: ok$", r.stdout, re.M), r.stdout


@needs_gpu
def test_status_shows_gpu_regions(fabric):
    proc = fabric.spawn([str(GPU_RDMA), "-m", "1048576", "-w", "3"])
    try:
        deadline = time.time() + 60
        seen = ""
        while time.time() < deadline and "memory regions on GPUs" not in seen:
            time.sleep(0.5)
            seen = fabric.ibemu("status").stdout
        assert re.search(r"memory regions on GPUs: [1-9]\d* \(\d+ bytes\)", seen), seen
    finally:
        out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out
