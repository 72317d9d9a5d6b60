"""nvidia-docker v1's REST API, served by the agent daemon (--nvidia_docker_api
HOST:PORT) with nvidia-docker's answer shapes, so scripts written for
nvidia-docker-plugin keep working. Routes, and the two answers that differ on
purpose: ARCHITECTURE.md, "The node side in detail"."""
import json
import logging
import os
import socketserver
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple
from urllib.parse import parse_qs, urlsplit

import pynvml

from isolator.discovery import devices, nvml, platform_features
from isolator.daemon import mesos_agent_flags
from isolator.discovery.gpu import Gpu
from isolator.containers.isolator import GpuIsolator
from volumes import environment, plugin
from common.errors import UserError

log = logging.getLogger("mesos-gpu.nvidia-docker-api")

DEFAULT_ADDRESS = "127.0.0.1:3476"        # nvidia-docker-plugin's default (localhost:3476)
MOUNT_OPTIONS = "ro,nocopy"
MiB = 1 << 20
# nvmlGpuTopologyLevel_t -> nvidia-docker's P2PLinkType (its numbers, in JSON).
P2P_LINKS = {0: 6, 10: 5, 20: 4, 30: 3, 40: 2, 50: 1}
P2P_NAMES = {0: "N/A", 1: "Cross CPU socket", 2: "Same CPU socket", 3: "Host PCI bridge",
             4: "Multiple PCI switches", 5: "Single PCI switch", 6: "Same board"}
# MB/s per PCIe lane by generation.
PCIE_LANE = {1: 250, 2: 500, 3: 985, 4: 1969, 5: 3938, 6: 7563}
FAMILIES = {"1": "Tesla", "2": "Fermi", "3": "Kepler", "5": "Maxwell", "6": "Pascal",
            "7.0": "Volta", "7.2": "Volta", "7.5": "Turing", "8.9": "Ada", "8": "Ampere",
            "9": "Hopper", "10": "Blackwell", "12": "Blackwell"}


def parse_address(text: str) -> Tuple[str, int]:
    """HOST:PORT (HOST required: nothing listens on every address by accident)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"--nvidia_docker_api={text}: expected HOST:PORT, e.g. {DEFAULT_ADDRESS}")
    return host.strip("[]"), int(port)


def _query(fn: Callable, *args) -> Any:
    """An NVML answer, or None where this GPU or driver cannot tell (as nvidia-docker)."""
    try:
        return fn(*args)
    except pynvml.NVMLError:
        return None


def _div(value: Optional[int], by: int) -> Optional[int]:
    return None if value is None else int(value) // by


def family(compute_capability: str) -> Optional[str]:
    major = compute_capability.split(".")[0]
    return FAMILIES.get(compute_capability) or FAMILIES.get(major)


def _numa_node(bus_id: str) -> Optional[int]:
    """The NUMA node of the GPU's PCI device (sysfs names it with a 4-digit domain)."""
    domain, _, rest = bus_id.lower().partition(":")
    try:
        with open(f"/sys/bus/pci/devices/{domain[-4:]}:{rest}/numa_node") as f:
            node = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


class GpuReport:
    """What nvidia-docker's /gpu/info and /gpu/status report, from NVML."""

    def __init__(self, gpus: Sequence[Gpu], library: Optional[str]) -> None:
        self.gpus = sorted(gpus, key=lambda g: g.index)
        self.library = library

    def info(self, driver: Optional[str], cuda: Optional[str]) -> Dict[str, Any]:
        with nvml.session(self.library):
            handles = [pynvml.nvmlDeviceGetHandleByIndex(g.index) for g in self.gpus]
            devs = [self._device(g, h) for g, h in zip(self.gpus, handles)]
            for i, j in ((i, j) for i in range(len(handles)) for j in range(i + 1, len(handles))):
                level = _query(pynvml.nvmlDeviceGetTopologyCommonAncestor, handles[i], handles[j])
                if level is None or level not in P2P_LINKS:
                    continue
                link = P2P_LINKS[level]
                devs[i]["Topology"] = (devs[i]["Topology"] or []) + [
                    {"BusID": devs[j]["PCI"]["BusID"], "Link": link}]
                devs[j]["Topology"] = (devs[j]["Topology"] or []) + [
                    {"BusID": devs[i]["PCI"]["BusID"], "Link": link}]
        return {"Version": {"Driver": driver, "CUDA": cuda}, "Devices": devs}

    def _device(self, gpu: Gpu, h) -> Dict[str, Any]:
        gen = _query(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h)
        width = _query(pynvml.nvmlDeviceGetMaxPcieLinkWidth, h)
        bar1 = _query(pynvml.nvmlDeviceGetBAR1MemoryInfo, h)
        mem_clock = _query(pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_MEM)
        bus_width = _query(pynvml.nvmlDeviceGetMemoryBusWidth, h)
        ecc = _query(pynvml.nvmlDeviceGetEccMode, h)
        return {
            "UUID": gpu.uuid, "Path": gpu.device_path, "Model": gpu.name,
            "Power": _div(_query(pynvml.nvmlDeviceGetPowerManagementLimit, h), 1000),
            "CPUAffinity": _numa_node(gpu.pci_bus_id),
            "PCI": {"BusID": gpu.pci_bus_id,
                    "BAR1": _div(bar1.bar1Total, MiB) if bar1 is not None else None,
                    "Bandwidth": PCIE_LANE[gen] * width if gen in PCIE_LANE and width else None},
            "Clocks": {"Cores": _query(pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_SM),
                       "Memory": mem_clock},
            "Topology": None,
            "Family": family(gpu.compute_capability), "Arch": gpu.compute_capability,
            "Cores": _query(pynvml.nvmlDeviceGetNumGpuCores, h),
            "Memory": {"ECC": bool(ecc[0]) if ecc is not None else None,
                       "Global": gpu.memory_total // MiB, "Shared": None, "Constant": None,
                       "L2Cache": None,
                       "Bandwidth": 2 * mem_clock * bus_width // 8
                       if mem_clock and bus_width else None}}

    def status(self) -> Dict[str, Any]:
        with nvml.session(self.library):
            return {"Devices": [self._status(pynvml.nvmlDeviceGetHandleByIndex(g.index))
                                for g in self.gpus]}

    def _status(self, h) -> Dict[str, Any]:
        rates = _query(pynvml.nvmlDeviceGetUtilizationRates, h)
        enc = _query(pynvml.nvmlDeviceGetEncoderUtilization, h)
        dec = _query(pynvml.nvmlDeviceGetDecoderUtilization, h)
        mem = _query(pynvml.nvmlDeviceGetMemoryInfo, h)
        bar1 = _query(pynvml.nvmlDeviceGetBAR1MemoryInfo, h)
        rx = _query(pynvml.nvmlDeviceGetPcieThroughput, h, pynvml.NVML_PCIE_UTIL_RX_BYTES)
        tx = _query(pynvml.nvmlDeviceGetPcieThroughput, h, pynvml.NVML_PCIE_UTIL_TX_BYTES)

        def ecc(location: int) -> Optional[int]:
            return _query(pynvml.nvmlDeviceGetMemoryErrorCounter, h,
                          pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC,
                          location)

        processes = [{"PID": int(p.pid), "Name": _process_name(int(p.pid)),
                      "MemoryUsed": int(p.usedGpuMemory or 0) // MiB}
                     for p in _query(pynvml.nvmlDeviceGetComputeRunningProcesses, h) or []]
        return {
            "Power": _div(_query(pynvml.nvmlDeviceGetPowerUsage, h), 1000),
            "Temperature": _query(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU),
            "Utilization": {"GPU": rates.gpu if rates is not None else None,
                            "Memory": rates.memory if rates is not None else None,
                            "Encoder": enc[0] if enc is not None else None,
                            "Decoder": dec[0] if dec is not None else None},
            "Memory": {"GlobalUsed": _div(mem.used, MiB) if mem is not None else None,
                       "ECCErrors": {"L1Cache": ecc(pynvml.NVML_MEMORY_LOCATION_L1_CACHE),
                                     "L2Cache": ecc(pynvml.NVML_MEMORY_LOCATION_L2_CACHE),
                                     "Global": ecc(pynvml.NVML_MEMORY_LOCATION_DEVICE_MEMORY)}},
            "Clocks": {"Cores": _query(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM),
                       "Memory": _query(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_MEM)},
            "PCI": {"BAR1Used": _div(bar1.bar1Used, MiB) if bar1 is not None else None,
                    "Throughput": {"RX": _div(rx, 1000), "TX": _div(tx, 1000)}},
            "Processes": processes or None}


def _process_name(pid: int) -> str:
    name = _query(pynvml.nvmlSystemGetProcessName, pid)
    if name:
        return name.decode() if isinstance(name, bytes) else str(name)
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return "N/A"


# ---- text forms ---------------------------------------------------------------

def _na(value: Any, unit: str = "") -> str:
    return "N/A" if value is None else f"{value}{unit}"


def _aligned(lines: List[str]) -> str:
    """Go's tabwriter as nvidia-docker used it: in each run of lines holding a
    tab, the text before the tab is padded to the run's widest."""
    out, run = [], []

    def flush() -> None:
        width = max((len(r.split("\t", 1)[0]) for r in run), default=0)
        out.extend(f"{a.ljust(width)}{b}" for a, b in (r.split("\t", 1) for r in run))
        run.clear()
    for line in lines:
        if "\t" in line:
            run.append(line)
        else:
            flush()
            out.append(line)
    flush()
    return "\n".join(out) + "\n"


def info_text(info: Dict[str, Any]) -> str:
    lines = ["", f"Driver version:  \t{info['Version']['Driver']}",
             f"Supported CUDA version:  \t{info['Version']['CUDA']}"]
    for i, d in enumerate(info["Devices"]):
        m, pci, clk = d["Memory"], d["PCI"], d["Clocks"]
        affinity = "N/A" if d["CPUAffinity"] is None else f"NUMA node{d['CPUAffinity']}"
        ecc = "N/A" if m["ECC"] is None else str(m["ECC"]).lower()
        lines += ["", f"Device #{i}", f"  Model:  \t{_na(d['Model'])}", f"  UUID:  \t{d['UUID']}",
                  f"  Path:  \t{d['Path']}", f"  Family: \t{_na(d['Family'])}",
                  f"  Arch:  \t{_na(d['Arch'])}", f"  Cores:  \t{_na(d['Cores'])}",
                  f"  Power:  \t{_na(d['Power'], ' W')}",
                  f"  CPU Affinity:  \t{affinity}",
                  "  PCI", f"    Bus ID:  \t{pci['BusID']}", f"    BAR1:  \t{_na(pci['BAR1'], ' MiB')}",
                  f"    Bandwidth:  \t{_na(pci['Bandwidth'], ' MB/s')}", "  Memory",
                  f"    ECC:  \t{ecc}",
                  f"    Global:  \t{_na(m['Global'], ' MiB')}",
                  f"    Constant:  \t{_na(m['Constant'], ' KiB')}",
                  f"    Shared:  \t{_na(m['Shared'], ' KiB')}",
                  f"    L2 Cache:  \t{_na(m['L2Cache'], ' KiB')}",
                  f"    Bandwidth:  \t{_na(m['Bandwidth'], ' MB/s')}", "  Clocks",
                  f"    Cores:  \t{_na(clk['Cores'], ' MHz')}",
                  f"    Memory:  \t{_na(clk['Memory'], ' MHz')}"]
        if d["Topology"]:
            lines.append("  P2P Available")
            lines += [f"    {t['BusID']} - {P2P_NAMES[t['Link']]}" for t in d["Topology"]]
        else:
            lines.append("  P2P Available:  \tNone")
    return _aligned(lines)


def status_text(status: Dict[str, Any], info: Dict[str, Any]) -> str:
    lines: List[str] = []
    for i, (s, d) in enumerate(zip(status["Devices"], info["Devices"])):
        u, m, pci, clk = s["Utilization"], s["Memory"], s["PCI"], s["Clocks"]
        power = (f"{s['Power']} / {d['Power']} W" if s["Power"] is not None and d["Power"]
                 else "N/A")
        used = (f"{m['GlobalUsed']} / {d['Memory']['Global']} MiB"
                if m["GlobalUsed"] is not None else "N/A")
        bar1 = (f"{pci['BAR1Used']} / {d['PCI']['BAR1']} MiB"
                if pci["BAR1Used"] is not None and d["PCI"]["BAR1"] else "N/A")
        lines += ["", f"Device #{i}", f"  Power:  \t{power}",
                  f"  Temperature:  \t{_na(s['Temperature'], ' °C')}", "  Utilization",
                  f"    GPU:  \t{_na(u['GPU'], ' %')}", f"    Memory:  \t{_na(u['Memory'], ' %')}",
                  f"    Encoder:  \t{_na(u['Encoder'], ' %')}",
                  f"    Decoder:  \t{_na(u['Decoder'], ' %')}", "  Memory",
                  f"    Global:  \t{used}", "    ECC Errors",
                  f"      L1 Cache:  \t{_na(m['ECCErrors']['L1Cache'])}",
                  f"      L2 Cache:  \t{_na(m['ECCErrors']['L2Cache'])}",
                  f"      Global:  \t{_na(m['ECCErrors']['Global'])}", "  PCI",
                  f"    BAR1:  \t{bar1}", "    Throughput",
                  f"      RX:  \t{_na(pci['Throughput']['RX'], ' MB/s')}",
                  f"      TX:  \t{_na(pci['Throughput']['TX'], ' MB/s')}", "  Clocks",
                  f"    Cores:  \t{_na(clk['Cores'], ' MHz')}",
                  f"    Memory:  \t{_na(clk['Memory'], ' MHz')}"]
        if s["Processes"]:
            lines.append("  Processes")
            for p in s["Processes"]:
                lines += [f"    - PID:  \t{p['PID']}", f"      Name:  \t{p['Name']}",
                          f"      Memory:  \t{p['MemoryUsed']} MiB"]
        else:
            lines.append("  Processes:  \tNone")
    return _aligned(lines)


# ---- the server -----------------------------------------------------------------

class _BadRequest(Exception):
    pass


class NvidiaDockerApi:
    """The API over one GPU isolator; `serve()` starts it in a thread."""

    def __init__(self, isolator: GpuIsolator, address: str, plugin_name: str,
                 dev_dir: str = "/dev", nvml_library: Optional[str] = None) -> None:
        self.isolator = isolator
        self.address = parse_address(address)
        self.plugin_name = plugin_name
        self.dev_dir = dev_dir
        self.report = GpuReport(list(isolator.gpus.values()), nvml_library)
        self._server: Optional[HTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    # answers
    def gpu_info(self) -> Dict[str, Any]:
        inv = self.isolator.inventory
        return self.report.info(inv.driver_version, inv.cuda_driver_version)

    def docker_cli(self, query: Dict[str, List[str]]) -> Dict[str, Any]:
        devs = (query.get("dev") or [""])[0].split()
        vols = (query.get("vol") or [""])[0].split()
        gpus = sorted(self.isolator.gpus.values(), key=lambda g: g.index)
        if not devs or devs == ["*"]:
            chosen = gpus
        else:
            chosen = []
            for d in devs:
                match = [g for g in gpus if (g.uuid.startswith(d) if d.startswith("GPU-")
                                             else d.isdigit() and g.index == int(d))]
                if not match:
                    raise _BadRequest(f"invalid device: {d}")
                chosen += [g for g in match[:1] if g not in chosen]
        volume = self.isolator.volume
        if volume is None:
            raise _BadRequest("no driver volume on this node (--driver_volume none)")
        version = volume.name[len("nvidia_"):]
        for v in vols:
            if v not in ("*", plugin.VOLUME_KIND):
                raise _BadRequest(f"invalid volume: {v}")
        return {"VolumeDriver": self.plugin_name,
                "Volumes": [f"{plugin.docker_volume_name(version)}:{environment.MOUNT_POINT}:{MOUNT_OPTIONS}"],
                "Devices": [self._device(n.path) for n in devices.control_devices(self.dev_dir)]
                + [self._device(os.path.join(self.dev_dir, f"nvidia{g.minor}")) for g in chosen]}

    def _device(self, host_path: str) -> str:
        inside = "/dev/" + os.path.basename(host_path)
        return host_path if host_path == inside else f"{host_path}:{inside}"

    def mesos_cli(self) -> str:
        gpus = sorted(self.isolator.gpus.values(), key=lambda g: g.index)
        inv = self.isolator.inventory
        platform = platform_features.for_gpus(inv.driver_version, inv.cuda_driver_version, gpus,
                                              platform_features.read_cpu())
        # nvidia-docker's order: attributes first
        return " ".join(reversed(mesos_agent_flags.lines(gpus, inv, None, platform)))

    def route(self, path: str, query: Dict[str, List[str]]) -> Tuple[int, str, bytes]:
        """(status, content type, body) for a GET of `path`."""
        if path.startswith("/v1.0/"):
            path = path[len("/v1.0"):]
        try:
            if path == "/gpu/info":
                return 200, "text/plain; charset=utf-8", info_text(self.gpu_info()).encode()
            if path == "/gpu/info/json":
                return 200, "application/json", _json(self.gpu_info())
            if path == "/gpu/status":
                text = status_text(self.report.status(), self.gpu_info())
                return 200, "text/plain; charset=utf-8", text.encode()
            if path == "/gpu/status/json":
                return 200, "application/json", _json(self.report.status())
            if path == "/docker/cli":
                a = self.docker_cli(query)
                text = f"--volume-driver={a['VolumeDriver']}" + \
                    "".join(f" --volume={v}" for v in a["Volumes"]) + \
                    "".join(f" --device={d}" for d in a["Devices"])
                return 200, "text/plain; charset=utf-8", text.encode()
            if path == "/docker/cli/json":
                return 200, "application/json", _json(self.docker_cli(query))
            if path == "/mesos/cli":
                return 200, "text/plain; charset=utf-8", self.mesos_cli().encode()
        except _BadRequest as e:
            return 400, "text/plain; charset=utf-8", f"{e}\n".encode()
        except nvml.NvmlUnavailable as e:
            return 503, "text/plain; charset=utf-8", f"NVML: {e}\n".encode()
        return 404, "text/plain; charset=utf-8", b"404 page not found\n"

    # serving
    def serve(self) -> "NvidiaDockerApi":
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version = "mesos-gpu-nvidia-docker"

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                status, ctype, body = api.route(url.path, parse_qs(url.query, keep_blank_values=True))
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _refuse(self) -> None:
                body = b"405 method not allowed\n"
                self.send_response(405)
                self.send_header("Allow", "GET")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

            def log_message(self, fmt: str, *args) -> None:
                log.debug("nvidia-docker api: " + fmt, *args)

        class Server(socketserver.ThreadingMixIn, HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        try:
            self._server = Server(self.address, Handler)
        except OSError as e:
            raise UserError(f"--nvidia_docker_api={self.address[0]}:{self.address[1]}: cannot "
                            f"listen there: {e.strerror or e}") from None
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="nvidia-docker-api", daemon=True)
        self._thread.start()
        host, port = self._server.server_address[:2]
        log.info("serving nvidia-docker's REST API on http://%s:%d/v1.0/ (GPUs %s, volume "
                 "driver %s)", host, port, [g.index for g in self.report.gpus], self.plugin_name)
        if host not in ("127.0.0.1", "::1", "localhost"):
            log.warning("nvidia-docker's REST API listens on %s, reachable from other hosts", host)
        return self

    @property
    def port(self) -> int:
        return self._server.server_address[1] if self._server else self.address[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _json(doc: Any) -> bytes:
    return (json.dumps(doc) + "\n").encode()            # Go's json.Encoder ends with a newline
