"""Device profiles and the cost model that prices a graph on a device."""

from .cost import CostModel, costed_program, linear_cost_model
from .device import Device, DeviceError, OpFamily, list_devices, load_device

__all__ = [
    "CostModel",
    "Device",
    "DeviceError",
    "OpFamily",
    "costed_program",
    "linear_cost_model",
    "list_devices",
    "load_device",
]
