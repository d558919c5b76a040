"""What NVML tells of a GPU: its SM and memory clocks, now and at most.

Read for the device's peaks (harness.profile.gpu_peaks: the clocks in place of the table's) and for the
environment a card records (harness.trial.environment). pynvml is optional (the gpu extras) and torch is
imported only to find the device's PCI address, so that importing this module costs nothing on the run's side.
"""

from __future__ import annotations


def nvml_clocks(index: int) -> dict[str, int | None]:
    """SM and memory clocks now and their maxima (MHz) from NVML; None without pynvml or NVML.

    Index `index` is NVML's, which equals torch's when CUDA_VISIBLE_DEVICES is unset; with it set,
    NVML still counts every GPU, so the handle is looked up by the device's PCI bus id instead.
    """
    out: dict[str, int | None] = {"sm_clock_mhz": None, "mem_clock_mhz": None,
                                  "max_sm_clock_mhz": None, "max_mem_clock_mhz": None}
    try:
        import pynvml

        pynvml.nvmlInit()
        bus_id = _pci_bus_id(index)
        handle = (pynvml.nvmlDeviceGetHandleByPciBusId(bus_id) if bus_id
                  else pynvml.nvmlDeviceGetHandleByIndex(index))
        for key, getter, clock in (("sm_clock_mhz", pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM),
                                   ("mem_clock_mhz", pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_MEM),
                                   ("max_sm_clock_mhz", pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_SM),
                                   ("max_mem_clock_mhz", pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_MEM)):
            try:
                out[key] = int(getter(handle, clock))
            except Exception:  # one query unsupported: keep the others
                pass
    except Exception:  # pynvml absent or NVML unavailable
        pass
    return out


def _pci_bus_id(index: int) -> str | None:
    """The device's PCI address as NVML spells it ("00000000:3B:00.0"), from torch's properties."""
    try:
        import torch

        props = torch.cuda.get_device_properties(index)
        # torch's stub of _CudaDeviceProperties lacks the PCI fields its runtime object has
        return f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"  # type: ignore[attr-defined]
    except Exception:  # an older torch without the PCI fields
        return None
