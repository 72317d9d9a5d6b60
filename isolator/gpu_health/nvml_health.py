"""What NVML says about a GPU's health and load: its events (EventListener) and a
sample of its figures (sample; sample_mig for a MIG device, which has its own
memory and processes but no utilisation of its own). Callers hold NVML initialised
(isolator.discovery.nvml.hold); NVML indices throughout."""
import ctypes
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Optional, Sequence

import pynvml

XID_EVENT = pynvml.nvmlEventTypeXidCriticalError
SBE_EVENT = pynvml.nvmlEventTypeSingleBitEccError
DBE_EVENT = pynvml.nvmlEventTypeDoubleBitEccError
WANTED_EVENTS = XID_EVENT | SBE_EVENT | DBE_EVENT
UNKNOWN_XID = 999          # what NVML reports for an XID it cannot name


def _pointer(handle) -> Optional[int]:
    return ctypes.cast(handle, ctypes.c_void_p).value


@dataclass(frozen=True)
class Event:
    index: int
    kind: str                  # "xid", "sbe" or "dbe"
    xid: Optional[int] = None


class EventListener:
    """An event set for the GPUs at `indices`. NVMLError when it cannot be made."""

    def __init__(self, indices: Sequence[int]) -> None:
        self._set = pynvml.nvmlEventSetCreate()
        self._by_pointer: Dict[int, int] = {}
        self.registered: Dict[int, int] = {}        # index -> event types
        try:
            for i in indices:
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                types = pynvml.nvmlDeviceGetSupportedEventTypes(handle) & WANTED_EVENTS
                if types:
                    pynvml.nvmlDeviceRegisterEvents(handle, types, self._set)
                    self.registered[i] = types
                self._by_pointer[_pointer(handle)] = i
        except BaseException:
            self.close()
            raise

    def wait(self, timeout_ms: int) -> Optional[Event]:
        """The next event, None after `timeout_ms` without one; NVMLError otherwise."""
        try:
            data = pynvml.nvmlEventSetWait(self._set, timeout_ms)
        except pynvml.NVMLError_Timeout:
            return None
        index = self._by_pointer.get(_pointer(data.device))
        if index is None:
            return None
        if data.eventType & XID_EVENT:
            return Event(index, "xid", int(data.eventData))
        if data.eventType & DBE_EVENT:
            return Event(index, "dbe")
        if data.eventType & SBE_EVENT:
            return Event(index, "sbe")
        return None

    def close(self) -> None:
        if self._set is not None:
            try:
                pynvml.nvmlEventSetFree(self._set)
            except pynvml.NVMLError:
                pass
            self._set = None


@dataclass
class ProcessSample:
    pid: int
    memory_used: int           # bytes
    sm_utilization: Optional[int] = None     # percent, from nvmlDeviceGetProcessUtilization


@dataclass
class DeviceSample:
    index: int
    lost: bool = False
    gpu_utilization: Optional[int] = None    # percent
    memory_utilization: Optional[int] = None
    memory_used: Optional[int] = None        # bytes
    memory_free: Optional[int] = None
    memory_total: Optional[int] = None
    temperature: Optional[int] = None        # Celsius
    slowdown_temperature: Optional[int] = None
    power_watts: Optional[float] = None
    ecc: Dict[str, int] = field(default_factory=dict)   # sbe_volatile, dbe_aggregate, ...
    retired_sbe: Optional[int] = None
    retired_dbe: Optional[int] = None
    retired_pending: Optional[bool] = None
    remapped_correctable: Optional[int] = None
    remapped_uncorrectable: Optional[int] = None
    remap_pending: Optional[bool] = None
    remap_failure: Optional[bool] = None
    processes: List[ProcessSample] = field(default_factory=list)
    errors: Dict[str, str] = field(default_factory=dict)   # NVML function -> its error
    uuid: Optional[str] = None


class _Lost(Exception):
    pass


Calling = Callable[[Optional[str]], None]   # told each NVML function before it runs, None after


class _Reader:
    """Calls NVML for one sample: not supported -> None, lost -> _Lost, other errors noted."""

    def __init__(self, sample: DeviceSample, calling: Optional[Calling] = None) -> None:
        self.sample = sample
        self.calling = calling

    def __call__(self, name: str, *args):
        if self.calling is not None:
            self.calling(name)
        try:
            return getattr(pynvml, name)(*args)
        except pynvml.NVMLError_GpuIsLost:
            raise _Lost() from None
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_NotFound):
            return None
        except pynvml.NVMLError as e:
            self.sample.errors[name] = str(e)
            return None
        finally:
            if self.calling is not None:
                self.calling(None)


ECC_COUNTERS = (("sbe_volatile", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC),
                ("dbe_volatile", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
                ("sbe_aggregate", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_AGGREGATE_ECC),
                ("dbe_aggregate", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                 pynvml.NVML_AGGREGATE_ECC))


def sample(index: int, with_processes: bool = True, since_us: int = 0,
           calling: Optional[Calling] = None) -> DeviceSample:
    """One GPU's figures now (`since_us`: process utilisation samples newer than this;
    `calling`: told each NVML call as it starts and ends, to see one that hangs)."""
    out = DeviceSample(index)
    read = _Reader(out, calling)
    try:
        handle = read("nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            return out
        uuid = read("nvmlDeviceGetUUID", handle)
        out.uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        mem = read("nvmlDeviceGetMemoryInfo", handle)
        if mem is not None:
            out.memory_used, out.memory_free, out.memory_total = (int(mem.used), int(mem.free),
                                                                  int(mem.total))
        rates = read("nvmlDeviceGetUtilizationRates", handle)
        if rates is not None:
            out.gpu_utilization, out.memory_utilization = int(rates.gpu), int(rates.memory)
        out.temperature = read("nvmlDeviceGetTemperature", handle, pynvml.NVML_TEMPERATURE_GPU)
        out.slowdown_temperature = read("nvmlDeviceGetTemperatureThreshold", handle,
                                        pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
        power = read("nvmlDeviceGetPowerUsage", handle)
        out.power_watts = power / 1000.0 if power is not None else None
        for name, error_type, counter in ECC_COUNTERS:
            count = read("nvmlDeviceGetTotalEccErrors", handle, error_type, counter)
            if count is not None:
                out.ecc[name] = int(count)
        sbe = read("nvmlDeviceGetRetiredPages", handle,
                   pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
        dbe = read("nvmlDeviceGetRetiredPages", handle,
                   pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        out.retired_sbe = len(sbe) if sbe is not None else None
        out.retired_dbe = len(dbe) if dbe is not None else None
        pending = read("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        out.retired_pending = bool(pending) if pending is not None else None
        rows = read("nvmlDeviceGetRemappedRows", handle)
        if rows is not None:
            (out.remapped_correctable, out.remapped_uncorrectable, pending_rows,
             failure) = (int(v) for v in rows)
            out.remap_pending, out.remap_failure = bool(pending_rows), bool(failure)
        if with_processes:
            out.processes = _processes(read, handle, since_us)
    except _Lost:
        out.lost = True
    return out


def mig_base(parent: DeviceSample, uuid: str) -> DeviceSample:
    """A MIG device's sample before its own figures are read: its GPU's, without the
    memory, processes and utilisation that are not the MIG device's (`errors`: those
    of its own calls only)."""
    return replace(parent, uuid=uuid, gpu_utilization=None, memory_utilization=None,
                   memory_used=None, memory_free=None, memory_total=None, processes=[],
                   errors={})


def _mig_figures(out: DeviceSample, read: _Reader, handle) -> None:
    mem = read("nvmlDeviceGetMemoryInfo", handle)
    if mem is not None:
        out.memory_used, out.memory_free, out.memory_total = (int(mem.used), int(mem.free),
                                                              int(mem.total))
    out.processes = _processes(read, handle, 0)


def sample_mig(parent: DeviceSample, uuid: str,
               calling: Optional[Calling] = None) -> DeviceSample:
    """The MIG device `uuid` (MIG-...): its memory and processes from its own handle,
    the rest of `parent` (its GPU's sample), no utilisation (NVML has none per MIG
    device). A MIG device NVML no longer knows reports no memory and no process."""
    out = mig_base(parent, uuid)
    if parent.lost:
        return out
    read = _Reader(out, calling)
    try:
        handle = read("nvmlDeviceGetHandleByUUID", uuid)
        if handle is not None:
            _mig_figures(out, read, handle)
    except _Lost:
        out.lost = True
    return out


def sample_migs(parent: DeviceSample, calling: Optional[Calling] = None
                ) -> Dict[str, DeviceSample]:
    """Every MIG device of the GPU `parent` was sampled from (in MIG mode), by UUID."""
    out: Dict[str, DeviceSample] = {}
    if parent.lost:
        return out
    read = _Reader(DeviceSample(parent.index), calling)
    try:
        handle = read("nvmlDeviceGetHandleByIndex", parent.index)
        count = read("nvmlDeviceGetMaxMigDeviceCount", handle) if handle is not None else None
        for i in range(int(count or 0)):
            mig = read("nvmlDeviceGetMigDeviceHandleByIndex", handle, i)
            if mig is None:
                continue                  # no MIG device at this index: the slots are sparse
            uuid = read("nvmlDeviceGetUUID", mig)
            if uuid is None:
                continue
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            one = out[uuid] = mig_base(parent, uuid)
            _mig_figures(one, _Reader(one, calling), mig)
    except _Lost:
        pass                              # the parent's own sample says it is lost
    return out


def sample_unit(unit) -> DeviceSample:
    """What is handed out (a whole GPU, or a MIG device: isolator.discovery.mig) now."""
    whole = sample(unit.index)
    return sample_mig(whole, unit.uuid) if getattr(unit, "parent_uuid", "") else whole


def _processes(read: _Reader, handle, since_us: int) -> List[ProcessSample]:
    procs = read("nvmlDeviceGetComputeRunningProcesses", handle) or []
    found = {int(p.pid): ProcessSample(int(p.pid), int(p.usedGpuMemory or 0)) for p in procs}
    latest: Dict[int, int] = {}
    for s in read("nvmlDeviceGetProcessUtilization", handle, since_us) or []:
        pid = int(s.pid)
        if pid in found and s.timeStamp >= latest.get(pid, -1):
            latest[pid] = s.timeStamp
            found[pid].sm_utilization = int(s.smUtil)
    return list(found.values())
