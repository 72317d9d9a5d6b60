"""Placing and starting N fractional-GPU tasks against the same N whole-GPU tasks.

Everything real on the bed: a Mesos 1.11 master and agent advertising what
`mesos-gpu agent flags --shared_gpus 6,7` prints for a fake 8 x V100 node (6 whole
GPUs, gpu_shares_6:4 and gpu_shares_7:4), the agent daemon with the real MPS
control daemon of the bed's 535 driver for GPUs 6 and 7, our executor, and the
`mesos-gpu framework` service. Each round posts an app of N instances of
`sleep`, either `"gpus": 1` or `"gpus": 0.25`, and times POST -> N tasks
TASK_RUNNING (matching, ACCEPT, the agent, the executor, prepare with a whole GPU
or a share, isolate, start); then deletes it and waits until the daemon holds
nothing. Whole and fractional rounds interleave. Prints the medians and the ratio
fractional / whole (target <= 1.2). Never asserts. Needs root.

    .venv/bin/python bench/share_placement.py [--tasks 6] [--rounds 3]
"""
import argparse
import base64
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from framework.process.framework_process import FrameworkProcess, add_arguments  # noqa: E402
from localcluster import fake_nvml  # noqa: E402
from localcluster.gpu_node import GpuNode, layout_for_driver_files  # noqa: E402
from localcluster.mesos import Agent, Master  # noqa: E402

WHOLE_GPUS = 6              # of the node's 8; GPUs 6 and 7 are shared (8 slots of 0.25)


class Api:
    def __init__(self, service: FrameworkProcess) -> None:
        self.url = service.http.url
        token = base64.b64encode((service.auth.credentials or "").encode()).decode()
        self.headers = {"Content-Type": "application/json"}
        if service.auth.credentials:
            self.headers["Authorization"] = f"Basic {token}"

    def call(self, method: str, path: str, body=None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data, self.headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                return reply.status, json.loads(reply.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")


def wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")


def one_round(api: Api, node: GpuNode, app_id: str, gpus: float, count: int) -> float:
    started = time.perf_counter()
    status, reply = api.call("POST", "/v2/apps", {
        "id": app_id, "cmd": "sleep 600", "cpus": 0.01, "mem": 8, "gpus": gpus,
        "instances": count})
    if status != 201:
        raise RuntimeError(f"POST {app_id}: {status} {reply}")

    def running():
        _, tasks = api.call("GET", f"/v2/apps{app_id}/tasks")
        return sum(t["state"] == "TASK_RUNNING" for t in (tasks or {}).get("tasks", [])) == count
    wait(running, 120, f"{count} tasks of {app_id} running")
    took = time.perf_counter() - started
    api.call("DELETE", f"/v2/apps{app_id}?force=true")
    wait(lambda: api.call("GET", f"/v2/apps{app_id}")[0] == 404
         and not node.client.info()["containers"], 120, f"{app_id} gone and its GPUs back")
    return took


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=6, help=f"N, 1 to {WHOLE_GPUS} (default 6)")
    p.add_argument("--rounds", type=int, default=3, help="whole/fractional pairs (default 3)")
    args = p.parse_args(argv)
    if not 1 <= args.tasks <= WHOLE_GPUS:
        p.error(f"--tasks must be 1 to {WHOLE_GPUS} (the node's whole GPUs)")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    layout = layout_for_driver_files(fake_nvml.layout("v100x8"), "bench-shares")
    with GpuNode(layout, share_args=["--shared_gpus", "6,7"]) as node, \
            tempfile.TemporaryDirectory(prefix="mgpu-bench-shares-") as state:
        resources, attributes = node.flags(cpus=8, mem=8192)
        # executors run the code this bench runs (a checkout's PYTHONPATH reaches them)
        passed = {k: os.environ[k] for k in ("PATH", "PYTHONPATH") if k in os.environ}
        env = {"MESOS_EXECUTOR_ENVIRONMENT_VARIABLES": json.dumps(passed)}
        with Master() as master, Agent(master, resources, attributes, hostname="127.0.0.1",
                                       env=env) as agent:
            parser = argparse.ArgumentParser()
            add_arguments(parser)
            service = FrameworkProcess(parser.parse_args([
                "--master", agent.master, "--state_dir", state, "--http_port", "0",
                "--agent_socket", str(node.socket), "--refuse_seconds", "1"])).start()
            try:
                service.scheduler.wait_subscribed(30)
                api = Api(service)
                whole, shares = [], []
                for i in range(args.rounds):
                    whole.append(one_round(api, node, f"/whole{i}", 1, args.tasks))
                    shares.append(one_round(api, node, f"/share{i}", 0.25, args.tasks))
                    print(f"  round {i + 1}: whole {whole[-1]:.2f} s  fractional "
                          f"{shares[-1]:.2f} s", flush=True)
            finally:
                service.stop()
    w, s = statistics.median(whole), statistics.median(shares)
    print(f"share_placement (bed: fake 8 x V100, GPUs 6,7 shared under MPS by the real 535 "
          f"control daemon; {args.tasks} tasks per app; {args.rounds} rounds, interleaved)")
    print(f"  {args.tasks} whole-GPU tasks (gpus 1)     POST -> all running  median {w:6.2f} s")
    print(f"  {args.tasks} fractional tasks (gpus 0.25) POST -> all running  median {s:6.2f} s")
    print(f"  ratio fractional/whole: {s / w:.2f}   (target <= 1.2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
