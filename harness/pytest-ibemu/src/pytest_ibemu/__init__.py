"""pytest-ibemu: test RDMA programs against ibemu's emulated InfiniBand HCAs."""
from .capture import Capture
from .control import Control, ControlError
from .fabric import Fabric, FabricError
from .packets import Packet
from .status import (CompletionQueue, Context, Counters, Device, MemoryRegion, Port, Process,
                     QueuePair)
from .subnet import Subnet

__all__ = ["Capture", "CompletionQueue", "Context", "Control", "ControlError", "Counters",
           "Device", "Fabric", "FabricError", "MemoryRegion", "Packet", "Port", "Process",
           "QueuePair", "Subnet"]
__version__ = "0.1.0"
