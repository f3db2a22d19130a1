"""pytest-ibemu: test RDMA programs against ibemu's emulated InfiniBand HCAs."""
from .capture import Capture
from .control import Control, ControlError
from .fabric import Fabric, FabricError
from .packets import Packet
from .status import Counters, Device, Port, Process
from .subnet import Subnet

__all__ = ["Capture", "Control", "ControlError", "Counters", "Device", "Fabric", "FabricError",
           "Packet", "Port", "Process", "Subnet"]
__version__ = "0.1.0"
