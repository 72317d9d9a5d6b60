"""Try mesos-gpu on this machine: bring up the embedded default (a local Mesos 1.11
cluster whose agent advertises this host's GPUs; simulated GPUs through a fake NVML
when the host has no NVIDIA driver, said plainly), show the agent's offer with its
GPUs as a GPU framework receives it, and shut everything down cleanly."""
import logging
import os
import sys
import threading
import time
from typing import Dict, List, Optional

from framework.embedded import bed_errors_as_user_errors, test_bed
from isolator import mesos_agent_flags, nvml
from isolator.gpu import Inventory
from volumes.errors import UserError

log = logging.getLogger("mesos-gpu.demo")
OFFER_TIMEOUT = 30.0


def say(text: str) -> None:
    print(text, flush=True)


def discover_or_simulate(library: Optional[str]) -> Inventory:
    """The host's GPUs, or a simulated Tesla K80 board when it has none."""
    inv = nvml.discover(library)
    if inv.gpus:
        say(f"[demo] host GPUs: {len(inv.gpus)} through {inv.library} "
            f"(driver {inv.driver_version})")
        return inv
    test_bed()
    from tests.bed import fake_nvml
    layout = fake_nvml.layout("k80")
    env = layout.env()
    os.environ.update(env)
    say(f"[demo] this host has no usable NVIDIA GPU ({inv.unavailable}).")
    say(f"[demo] SIMULATING a Tesla K80 board (2 GPUs) through the fake NVML library "
        f"{env['MESOS_GPU_NVML_LIBRARY']}; nothing below touches real GPU hardware.")
    return nvml.discover(env["MESOS_GPU_NVML_LIBRARY"])


def agent_settings(inv: Inventory) -> Dict[str, str]:
    """--resources and --attributes as `mesos-gpu agent flags` prints them."""
    settings = {"resources": "", "attributes": ""}
    for line in mesos_agent_flags.lines(inv.gpus, inv, "cpus:2;mem:2048;disk:4096"):
        name, _, value = line.lstrip("-").partition("=")
        settings[name] = value
    return settings


def wait_for_offer(address: str, timeout: float) -> List[dict]:
    """Subscribe as a GPU_RESOURCES framework and return the first offers."""
    from pymesos import MesosSchedulerDriver, Scheduler

    got: List[dict] = []
    ready = threading.Event()

    class FirstOffer(Scheduler):
        def resourceOffers(self, driver, offers):
            got.extend(offers)
            for o in offers:
                driver.declineOffer(o["id"])
            ready.set()

    framework = {"user": "root", "name": "mesos-gpu-demo", "hostname": "127.0.0.1",
                 "capabilities": [{"type": "GPU_RESOURCES"}]}
    driver = MesosSchedulerDriver(FirstOffer(), framework, address, use_addict=False)
    driver.start()
    try:
        if not ready.wait(timeout):
            raise UserError(f"no offer from the local Mesos master {address} within {timeout:.0f} s")
    finally:
        driver.stop()
        driver.join()
    return got


def describe_offer(offer: dict) -> str:
    res = {r["name"]: r.get("scalar", {}).get("value", r.get("ranges")) for r in offer["resources"]}
    attrs = {a["name"]: (a.get("text") or a.get("scalar") or {}).get("value")
             for a in offer.get("attributes", [])}
    lines = [f"  agent     {offer['hostname']} ({offer['agent_id']['value']})",
             f"  resources cpus={res.get('cpus')} mem={res.get('mem')} MB gpus={res.get('gpus')}"]
    lines += [f"  attribute {k}={v}" for k, v in sorted(attrs.items())]
    return "\n".join(lines)


def run(args) -> int:
    with bed_errors_as_user_errors():
        return _run(args)


def _run(args) -> int:
    t0 = time.time()
    inv = discover_or_simulate(args.nvml_library)
    settings = agent_settings(inv)
    test_bed()
    from tests.bed import mesos
    say("[demo] building/checking the local Mesos 1.11 cluster (first run downloads ~27 MB)")
    mesos.build()
    say(f"[demo] starting Mesos master + agent with --resources={settings['resources']}")
    cluster = mesos.LocalCluster(resources=settings["resources"],
                                 attributes=settings["attributes"])
    cluster.start()
    try:
        say(f"[demo] master at http://{cluster.address}; waiting for the agent's offer")
        offers = wait_for_offer(cluster.address, OFFER_TIMEOUT)
        for offer in offers:
            say("[demo] offer received by a GPU_RESOURCES framework:")
            say(describe_offer(offer))
    finally:
        say("[demo] shutting down the local cluster")
        cluster.stop()
    say(f"[demo] done in {time.time() - t0:.1f} s; nothing left running")
    return 0
