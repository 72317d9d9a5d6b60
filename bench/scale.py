"""Scale: many GPU nodes under one Mesos master, what our part costs, against the same
work without GPUs (and our executor against the Mesos command executor), in one run.

The cluster is localcluster/gpu_cluster.py: one master, --nodes agents each over its
own agent daemon and fake 8-GPU NVML, plus --spare nodes (as many as --kill by default)
so that the tasks of the killed agents have GPUs to move to, and the framework as a
process of its own. The tasks are --apps apps x --instances MESOS tasks without an
image (`sleep`), one GPU each; the baseline is the same apps with no GPU, submitted
first on the same cluster and removed before the GPU run.

Printed side by side:
- submit -> all TASK_RUNNING (the master's view), 1-GPU tasks vs no GPU (target <= 1.2);
- the framework's CPU seconds in each, its peak RSS; the agent daemons' CPU and RSS;
- our executor's RSS per task vs the Mesos command executor's (the bed's is the
  stand-in of localcluster/mesos_local, on our executor driver: the PyPI bundle has no
  C++ one);
- GET /v2/apps, /v2/tasks and the dashboard's /v1/nodes with every task running, p50/p99
  and size, against GET /v2/info (a fixed small answer of the same server);
- --kill agents SIGKILLed at once: until every lost task runs again on another node
  (split into the master's detection, its ping timeouts shortened to MASTER_PINGS, and
  ours after it), and how many GPUs any daemon granted twice (must be 0);
- the killed agents restarted (their orphaned tasks come back), every app scaled to 0:
  until every GPU is free in every agent daemon's ledger.
Never asserts a time.

    .venv/bin/python bench/scale.py [--nodes 20] [--apps 16] [--instances 10] [--kill 3]
"""
import argparse
import json
import os
import signal
import statistics
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localcluster import processes  # noqa: E402
from localcluster.cognitive.launch import Api  # noqa: E402
from localcluster.gpu_cluster import GPUS_PER_NODE, GpuCluster, rss_kib  # noqa: E402
from localcluster.paths import LocalClusterError  # noqa: E402
from tests.bed.v1_scheduler import SchedulerStream  # noqa: E402

# The master declares an agent gone after these pings fail (Mesos's default: 15 s x 5).
# Shorter keeps the SIGKILL phase short; shorter still (1 s x 3) made a loaded 2-core
# machine lose live agents, and their tasks, in the middle of the submit phase.
MASTER_PINGS = {"MESOS_AGENT_PING_TIMEOUT": "3secs", "MESOS_MAX_AGENT_PING_TIMEOUTS": "5"}
TICK = os.sysconf("SC_CLK_TCK")
WAIT = float(os.environ.get("SCALE_BENCH_WAIT", 600))


AGENT_CPUS = 4


def cpus_of(gpus: int) -> float:
    """A task's cpus: the no-GPU baseline's tasks take an eighth of an agent each, so that
    they lie 8 to an agent as the one-GPU tasks do (with 0.01 they were packed up to 93 on
    one agent, whose Mesos containerizer then could not start them all within the
    executor registration minute: the baseline, not the GPUs, stopped the bench at 30
    nodes)."""
    return 0.01 if gpus else AGENT_CPUS / GPUS_PER_NODE


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of the process so far (0 once gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return 0.0
    fields = stat[stat.rfind(b")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def peak_rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def pct(values, q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def mib(kib: float) -> float:
    return kib / 1024


class Bench:
    def __init__(self, cluster: GpuCluster, args: argparse.Namespace) -> None:
        self.cluster, self.args = cluster, args
        self.api = Api(cluster.api_url, auth=cluster.credentials)
        self.master = cluster.master
        self.tasks = args.apps * args.instances

    # -- views ------------------------------------------------------------------
    def master_tasks(self) -> list:
        with urllib.request.urlopen(f"{self.master.url}/master/tasks?limit=100000",
                                    timeout=30) as r:
            return json.load(r)["tasks"]

    def running(self, exclude_agents=(), only_agents=None) -> int:
        return sum(1 for t in self.master_tasks()
                   if t["state"] == "TASK_RUNNING" and t["slave_id"] not in exclude_agents
                   and (only_agents is None or t["slave_id"] in only_agents))

    def wait(self, check, what: str, timeout: float = WAIT, interval: float = 0.25) -> float:
        print(f"  ... waiting: {what}", file=sys.stderr, flush=True)
        start = time.monotonic()
        try:
            processes.wait_until(check, timeout, what, interval=interval)
        except LocalClusterError:
            print(f"STOPPED: {what}: not reached in {timeout:.0f} s; {self.running()} of "
                  f"{self.tasks} tasks running. {self.cpu_split()}", flush=True)
            raise
        return time.monotonic() - start

    def cpu_split(self) -> str:
        """Where this machine's CPU went, by kind of process (where the bench stops)."""
        nodes = self.cluster.nodes
        kinds = {"Mesos agents": sum(cpu_s(n.agent.pid) for n in nodes if n.agent.pid),
                 "Mesos master": cpu_s(self.cluster.master.pid),
                 "agent daemons": self.daemons_cpu(),
                 "framework": cpu_s(self.cluster.framework.pid),
                 "our executors": sum(cpu_s(p) for p in self.executors(b"mesos_gpu\0executor"))}
        total = sum(kinds.values()) or 1.0
        return "CPU s so far: " + ", ".join(f"{k} {v:.0f} ({v / total:.0%})"
                                            for k, v in kinds.items())

    def daemons_cpu(self) -> float:
        return sum(cpu_s(n.daemon.proc.pid) for n in self.cluster.nodes)

    # -- phases -----------------------------------------------------------------
    def submit(self, prefix: str, gpus: int) -> dict:
        fw = self.cluster.framework.pid
        fw_cpu, d_cpu = cpu_s(fw), self.daemons_cpu()
        start = time.monotonic()
        for a in range(self.args.apps):
            self.api.call("POST", "/v2/apps", {
                "id": f"/scale/{prefix}{a:03d}", "cmd": "sleep 3600", "cpus": cpus_of(gpus),
                "mem": 8,
                "gpus": gpus, "instances": self.args.instances,
                # every agent has GPUs: the no-GPU baseline may use them (Marathon's label)
                "labels": {} if gpus else {"GPU_SCHEDULING_BEHAVIOR": "unrestricted"}})
        self.wait(lambda: self.running() >= self.tasks, f"{self.tasks} tasks running")
        return {"seconds": time.monotonic() - start, "fw_cpu": cpu_s(fw) - fw_cpu,
                "daemons_cpu": self.daemons_cpu() - d_cpu}

    def warm_up(self) -> None:
        for prefix, gpus in (("warm-cpu", 0), ("warm-gpu", 1)):
            self.api.call("POST", "/v2/apps", {
                "id": f"/scale/{prefix}", "cmd": "sleep 3600", "cpus": cpus_of(gpus), "mem": 8,
                "gpus": gpus, "instances": self.args.nodes,
                "labels": {} if gpus else {"GPU_SCHEDULING_BEHAVIOR": "unrestricted"}})
            self.wait(lambda: self.running() >= self.args.nodes, f"{prefix}: tasks running")
            self.api.call("DELETE", f"/v2/apps/scale/{prefix}")
            self.wait(lambda: self.running() == 0 and not self.executors(b"mesos_gpu\0executor"),
                      f"{prefix}: every task and executor gone")

    def remove(self, prefix: str) -> None:
        for a in range(self.args.apps):
            self.api.call("DELETE", f"/v2/apps/scale/{prefix}{a:03d}")
        self.wait(lambda: self.running() == 0 and not self.executors(b"mesos_gpu\0executor"),
                  "every task and executor gone")

    def executors(self, marker: bytes) -> list:
        found = []
        for node in self.cluster.nodes:
            if node.agent.run_dir is None:
                continue
            for pid in processes.members(node.agent.run_dir):
                try:
                    if marker in Path(f"/proc/{pid}/cmdline").read_bytes():
                        found.append(pid)
                except OSError:
                    pass
        return found

    def command_executor_rss(self, count: int) -> float:
        """Mean RSS (KiB) of the Mesos command executor over `count` sleeping tasks of a
        plain v1 framework on one node."""
        with SchedulerStream(self.master.address, gpu_resources=True,
                             name="scale-command-executor") as stream:
            offers = stream.offers(30, until=bool)
            offer = offers[0]
            tasks = [{"name": f"cmd{i}", "task_id": {"value": f"cmd{i}"},
                      "agent_id": offer["agent_id"],
                      "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.01}},
                                    {"name": "mem", "type": "SCALAR", "scalar": {"value": 8}}],
                      "command": {"shell": True, "value": "exec sleep 3600"}}
                     for i in range(count)]
            status, body = stream.accept([offer], [{"type": "LAUNCH",
                                                    "launch": {"task_infos": tasks}}])
            if status != 202:
                raise RuntimeError(f"the command tasks were refused: HTTP {status} {body!r}")
            pids = processes.wait_until(
                lambda: (lambda p: p if len(p) >= count else None)(
                    self.executors(b"command_executor")), 120, f"{count} command executors")
            time.sleep(1)                          # past their start-up
            rss = [rss_kib(p) for p in pids]
        self.wait(lambda: not self.executors(b"command_executor"), "command executors gone", 60)
        return statistics.mean(rss)

    def api_latency(self, path: str) -> dict:
        headers = dict(self.api.headers)
        times, size = [], 0
        for _ in range(self.args.samples):
            request = urllib.request.Request(self.cluster.api_url + path, headers=headers)
            start = time.perf_counter()
            with urllib.request.urlopen(request, timeout=60) as r:
                size = len(r.read())
            times.append(time.perf_counter() - start)
        return {"p50": statistics.median(times) * 1000, "p99": pct(times, 0.99) * 1000,
                "bytes": size}

    def kill_agents(self) -> dict:
        """SIGKILL --kill agents that run tasks, at once; until their tasks run elsewhere."""
        by_agent = {}
        for t in self.master_tasks():
            if t["state"] == "TASK_RUNNING":
                by_agent.setdefault(t["slave_id"], []).append(t)
        victims = [n for n in self.cluster.nodes if by_agent.get(n.agent.id)][:self.args.kill]
        killed = {n.agent.id for n in victims}
        lost = sum(len(by_agent[a]) for a in killed)
        start = time.monotonic()
        for node in victims:
            node.agent.crash()
        detected = self.wait(lambda: self.running(only_agents=killed) == 0,
                             "the master marks them lost", interval=0.1)
        again = self.wait(lambda: self.running(exclude_agents=killed) >= self.tasks,
                          "the lost tasks running again", interval=0.1) + detected
        twice = 0
        for node in self.cluster.nodes:
            held = [m for c in node.daemon.containers().values() for m in c["gpus"]]
            twice += len(held) - len(set(held))
        return {"victims": victims, "lost": lost, "detected": detected, "again": again,
                "twice": twice, "seconds": time.monotonic() - start}

    def scale_to_zero(self, prefix: str, victims) -> float:
        for node in victims:                     # the orphaned tasks come back with them
            node.agent.restart()
        for node in victims:
            node.agent.wait_registered(60)
        start = time.monotonic()
        for a in range(self.args.apps):
            self.api.call("PUT", f"/v2/apps/scale/{prefix}{a:03d}", {"instances": 0})

        def free():
            held = {n.hostname: n.daemon.allocated() for n in self.cluster.nodes}
            return all(not v for v in held.values())
        try:
            processes.wait_until(free, self.args.free_timeout, "every GPU free", interval=0.2)
        except Exception:  # noqa: BLE001 - reported as a figure, not a crash
            held = {n.hostname: n.daemon.allocated() for n in self.cluster.nodes
                    if n.daemon.allocated()}
            print(f"scale to 0: GPUs still held after {self.args.free_timeout:.0f} s: {held}")
            return float("nan")
        return time.monotonic() - start


def run(args: argparse.Namespace) -> int:
    nodes = args.nodes + args.spare
    print(f"scale bench: {args.nodes} GPU nodes + {args.spare} spare (room for the killed "
          f"agents' tasks) x {GPUS_PER_NODE} GPUs, {args.apps} apps x {args.instances} "
          f"instances = {args.apps * args.instances} tasks (MESOS, no image, sleep); "
          f"{os.cpu_count()} CPUs, shared with other work", flush=True)
    up = time.monotonic()
    cluster = GpuCluster(nodes=nodes, framework=True, cpus=AGENT_CPUS, mem=4096,
                         master_env=MASTER_PINGS)
    try:
        with cluster:
            up = time.monotonic() - up
            bench = Bench(cluster, args)
            memory = cluster.memory()
            d_rss = [m["daemon_kib"] for m in memory]
            a_rss = [m["agent_kib"] for m in memory]
            print(f"cluster up in {up:.1f} s; memory per node (RSS): agent daemon p50 "
                  f"{mib(statistics.median(d_rss)):.1f} MiB max {mib(max(d_rss)):.1f}, Mesos agent "
                  f"p50 {mib(statistics.median(a_rss)):.1f} MiB max {mib(max(a_rss)):.1f}; "
                  f"master {mib(rss_kib(cluster.master.pid)):.1f} MiB", flush=True)

            command_rss = bench.command_executor_rss(min(GPUS_PER_NODE, bench.tasks))
            if args.warmup:
                # each agent's first tasks pay once what no later one does (its framework
                # and executor directories, the executor's compiled modules): paid here by
                # both kinds, so that the first measured run is not charged for it
                warm = time.monotonic()
                bench.warm_up()
                print(f"warm-up (one app of each kind, {args.nodes} tasks each): "
                      f"{time.monotonic() - warm:.1f} s", flush=True)
            plain = bench.submit("cpu", 0)
            bench.remove("cpu")
            gpu = bench.submit("gpu", 1)
            ours = [rss_kib(p) for p in bench.executors(b"mesos_gpu\0executor")]
            fw = cluster.framework.pid
            daemons_rss = sum(rss_kib(n.daemon.proc.pid) for n in cluster.nodes)
            print(f"{'':<34}{'1-GPU tasks':>12}{'no GPU':>10}{'ratio':>9}")
            print(f"{'submit -> all TASK_RUNNING':<34}{gpu['seconds']:>10.2f} s{plain['seconds']:>8.2f} s"
                  f"{gpu['seconds'] / plain['seconds']:>8.2f}x   (target <= 1.2)")
            print(f"{'framework CPU s':<34}{gpu['fw_cpu']:>12.2f}{plain['fw_cpu']:>10.2f}"
                  f"{gpu['fw_cpu'] / max(plain['fw_cpu'], 0.01):>8.2f}x")
            print(f"{'agent daemons CPU s (all)':<34}{gpu['daemons_cpu']:>12.2f}"
                  f"{plain['daemons_cpu']:>10.2f}"
                  f"{gpu['daemons_cpu'] / max(plain['daemons_cpu'], 0.01):>8.2f}x")
            print(f"{'':<34}{'ours':>12}{'baseline':>10}{'ratio':>9}")
            print(f"{'executor RSS per task MiB':<34}{mib(statistics.mean(ours)):>12.1f}"
                  f"{mib(command_rss):>10.1f}{statistics.mean(ours) / command_rss:>8.2f}x"
                  f"   (baseline: the bed's command executor, {len(ours)} of ours)")
            print(f"framework peak RSS {mib(peak_rss_kib(fw)):.1f} MiB; agent daemons RSS "
                  f"{mib(daemons_rss):.1f} MiB in all, {mib(daemons_rss / nodes):.1f} per node",
                  flush=True)

            floor = bench.api_latency("/v2/info")
            for path in ("/v2/apps", "/v2/tasks", "/v1/nodes"):
                r = bench.api_latency(path)
                print(f"GET {path:<10} p50 ms {r['p50']:>8.2f}   p99 ms {r['p99']:>8.2f}  "
                      f"{r['bytes'] / 1024:>8.1f} KiB   vs GET /v2/info p50 {floor['p50']:.2f} ms: "
                      f"{r['p50'] / floor['p50']:.1f}x, p99 {floor['p99']:.2f} ms: "
                      f"{r['p99'] / floor['p99']:.1f}x")
            k = bench.kill_agents()
            print(f"{len(k['victims'])} agents SIGKILLed: lost tasks running again {k['again']:.2f} s "
                  f"({k['lost']} tasks; the master marked them lost after {k['detected']:.2f} s, "
                  f"ours after that {k['again'] - k['detected']:.2f} s); GPUs granted twice: "
                  f"{k['twice']}", flush=True)
            free = bench.scale_to_zero("gpu", k["victims"])
            print(f"scale to 0: every GPU free {free:.2f} s (in all {nodes} daemons' ledgers, "
                  f"the {len(k['victims'])} killed agents restarted before)", flush=True)
    finally:
        left = cluster.leftovers()
        print("left behind: " + (", ".join(left) if left else "nothing"), flush=True)
    return 1 if left else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=20, help="GPU nodes for the tasks (default 20)")
    p.add_argument("--spare", type=int, help="more nodes (default: --kill)")
    p.add_argument("--apps", type=int, default=16)
    p.add_argument("--instances", type=int, default=10, help="per app (default 10)")
    p.add_argument("--kill", type=int, default=3, help="agents SIGKILLed at once (default 3)")
    p.add_argument("--samples", type=int, default=100, help="requests per API row")
    p.add_argument("--free-timeout", type=float, default=120.0)
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="measure the first tasks each agent runs too")
    args = p.parse_args()
    if args.spare is None:
        args.spare = args.kill
    for name in ("nodes", "apps", "instances", "kill", "samples"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    if args.apps * args.instances > args.nodes * GPUS_PER_NODE:
        p.error(f"{args.apps * args.instances} one-GPU tasks do not fit on {args.nodes} nodes "
                f"of {GPUS_PER_NODE} GPUs")
    # SIGTERM (timeout, a CI's cancel) unwinds as Ctrl-C does, so the cluster comes down.
    signal.signal(signal.SIGTERM, _interrupt)
    return run(args)


def _interrupt(signum: int, _frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


if __name__ == "__main__":
    sys.exit(main())
