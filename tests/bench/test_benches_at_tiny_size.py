"""Every bench in bench/ at a tiny size, so that a renamed concept breaks a test and not
a measurement nobody runs: each runs as the operator runs it (a subprocess of the
script, real daemons, real cgroups, the fake NVML) and must print its figures and
its baseline ratio. bench/gpu_task_overhead.py has its own file, the model of these."""
import os
import re
import subprocess
import sys

import pytest

from tests.bed import REPO

NUM = r"[0-9]+(?:\.[0-9]+)?"

# script -> (tiny arguments, patterns its output must hold: figures, then the ratio)
TINY = {
    "agent_api_load.py": (
        ["--seconds", "0.3", "--clients", "1,4"],
        [rf"^ +1 +{NUM} +1\.00x +{NUM} +{NUM} +1\.00x +0$",          # no failed cycle
         rf"^ +4 +{NUM} +{NUM}x +{NUM} +{NUM} +{NUM}x +0$"]),
    "burst.py": (
        ["--apps", "4", "--scales", "3", "--instances", "2", "--docker", "1", "--settle", "0.5"],
        [rf"Mesos listed all 2 {NUM} s after the last scale call; 0\.5 s later \d+ running, "
         rf"\d+ Docker containers; API calls reset and tried again: \d+",
         rf"all running after the burst s +{NUM} +{NUM} +{NUM}x",
         r"per launch, MESOS tasks \(1\)", r"per launch, DOCKER tasks \(1\)",
         rf"^  launch -> TASK_RUNNING +{NUM} +{NUM} +{NUM}x$",
         rf"create\+start vs plain docker, as many at once +{NUM} +{NUM} +{NUM}x",
         rf"ours: -m mesos_gpu executor +{NUM} +{NUM} +{NUM}x",
         rf"command executor stand-in: its driver +{NUM} +{NUM} +1\.00x", r"^left behind: nothing$"]),
    "failover.py": (
        ["--rounds", "1", "--session-timeout-ms", "1000"],
        [rf"^ +1 +{NUM} +{NUM} +{NUM} +0 +0$",                        # none lost, none twice
         rf"median failover {NUM} s vs median session expiry {NUM} s: {NUM}x"]),
    "flood.py": (
        ["--seconds", "0.5", "--interval", "5"],
        [rf"^polite \(reads answers\) +\d+ +{NUM} +-?{NUM}$",
         rf"^flood \(never reads\) +\d+ +{NUM} +-?{NUM}$",
         r"another client served during the flood: yes",
         rf"ratio flood/polite growth \(\+1 MiB each\) {NUM}x"]),
    "gang_launch.py": (
        ["--nodes", "2", "--gpus", "2", "--rounds", "1"],
        [r"^  round 0: gang of 2 x 2 GPUs all running in [0-9.]+ s on 1 node\(s\)$",
         r"^  round 0: 4 independent one-GPU tasks all running in [0-9.]+ s$",
         rf"^submit to all running, median s +{NUM} +{NUM} +{NUM}x$",
         r"^left behind: nothing$"]),
    "gang_placement.py": (
        ["--agents", "10", "--gangs", "12", "--losses", "1"],
        [r"^gang placement: 10 agents x 8 GPUs, 12 gangs",
         rf"^useful GPU utilisation +{NUM} +{NUM} +(?:{NUM}x|-)$",
         rf"^time to start p99 \(rounds\) +{NUM} +{NUM} +(?:{NUM}x|-)$",
         r"^partly placed over 30 rounds +0 +\d+ +-$",          # ours: never beyond the bound
         r"^deadlocked at the end +0 +\d+ +-$"]),
    "gpu_metrics.py": (
        ["--scrapes", "5", "--idle", "1", "--events", "2"],
        [rf"/metrics over TCP +{NUM} ms CPU per scrape, wall p50 {NUM} ms",
         rf"XID -> GPU unhealthy +p50 +{NUM} ms, p99 +{NUM} ms over 2 injections",
         rf"bare nvmlEventSetWait +p50 +{NUM} ms",
         rf"ratio +p50 x{NUM}, p99 x{NUM}"]),
    "isolator_cycle.py": (
        ["--cycles", "5"],
        [rf"^{mode} +{NUM} +{NUM} +{NUM}x +{NUM} +{NUM}x" for mode in ("v1", "v2", r"v1\+v2")]),
    "launch_overhead.py": (
        ["--runs", "1", "--cold_runs", "1", "--layer_mb", "1"],
        [rf"plain docker run +{NUM}ms", rf"ours \(GPU, volume\) +{NUM}ms",
         rf"ratio ours / plain +{NUM} +{NUM}", rf"plain docker pull \+ run +{NUM}ms",
         rf"ours \(pull, GPU, volume\) +{NUM}ms", rf"ratio cold ours / plain +{NUM} +{NUM}"]),
    "ledger_recovery.py": (
        ["--containers", "20"],
        [rf"^v1 +{NUM} +{NUM} +{NUM} +- +-$", rf"^v2 +{NUM} +{NUM} +{NUM} +- +-$",
         rf"^v1\+v2 +{NUM} +{NUM} +{NUM} +{NUM} +2$"]),                 # 10% dead: 2 released
    "marathon_api.py": (
        ["--apps", "5", "--gets", "5", "--posts", "5", "--health-apps", "1"],
        [rf"POST /v2/apps \(5\) +{NUM} req/s", rf"ratio ours/floor +{NUM} x tput",
         rf"MESOS_HTTP \(executor\) +all running +{NUM} s +deployment done +{NUM} s +"
         rf"ratio to no check +{NUM} x"]),
    "placement.py": (
        ["--sizes", "20x5"],
        [rf"20 tasks x +5 offers \| grouped matcher: +{NUM} s CPU, +{NUM} placed.*"
         rf"first-fit: +{NUM} s CPU.*speed-up x{NUM}"]),
    "reregistration.py": (
        ["--tasks", "1", "--hogs", "1", "--rounds", "1"],
        [rf"^ours +{NUM} +{NUM} +{NUM} +\d+ of 1 +0$",                 # it re-registered
         r"^command executor +\S+ +\S+ +\S+ +\d+ of 1 +\d+$",
         r"ratio ours / command executor +p50 \S+x +p99 \S+x"]),
    "scale.py": (
        ["--nodes", "2", "--apps", "2", "--instances", "2", "--kill", "1", "--samples", "5"],
        [rf"warm-up \(one app of each kind, 2 tasks each\): {NUM} s",
         rf"submit -> all TASK_RUNNING +{NUM} s +{NUM} s +{NUM}x",
         rf"framework CPU s +{NUM} +{NUM} +{NUM}x",
         rf"executor RSS per task MiB +{NUM} +{NUM} +{NUM}x",
         rf"GET /v2/tasks +p50 ms +{NUM} +p99 ms +{NUM}", rf"GET /v1/nodes +p50 ms +{NUM}",
         rf"1 agents SIGKILLed: lost tasks running again +{NUM} s.*granted twice: 0",
         rf"scale to 0: every GPU free +{NUM} s", r"^left behind: nothing$"]),
    "ui_page_load.py": (
        ["--apps", "5", "--nodes", "3", "--samples", "3"],
        [rf"page load, nodes view, unchanged +p50 +{NUM} ms",
         rf"ratio page/GET /v2/apps +p50 +{NUM} x"]),
    "variant_selection.py": (
        ["--offers", "20", "--variants", "3", "--repeat", "1"],
        [rf"20 offers .* selection: plain matcher +{NUM} s CPU \(20 placed\), with variants "
         rf"+{NUM} s CPU \(20 placed, pinned\) \| ratio x{NUM}"]),
    "volume_build.py": (
        ["--runs", "1"],
        [rf"\[one driver\] ratio cp -a / builder: +{NUM} x",
         rf"\[two drivers\] ratio cp -a / builder: +{NUM} x"]),
}
OWN_FILE = {"gpu_task_overhead.py", "gpu_topology_choice.py", "mig_placement.py",
            "queue_trace.py", "share_placement.py"}                   # tests/bench/test_<name>.py


def test_every_bench_has_a_tiny_run():
    """A bench added without a tiny run here fails this test (a helper module that is
    no script, such as in_process_api.py, has no __main__ and is not a bench)."""
    scripts = {p.name for p in (REPO / "bench").glob("*.py")
               if '__name__ == "__main__"' in p.read_text()}
    assert scripts - OWN_FILE - set(TINY) == set()
    assert set(TINY) - scripts == set()


@pytest.mark.parametrize("script", sorted(TINY))
def test_the_bench_runs_at_a_tiny_size_and_prints_its_figures(script):
    args, patterns = TINY[script]
    r = subprocess.run([sys.executable, str(REPO / "bench" / script), *args],
                       capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    for pattern in patterns:
        assert re.search(pattern, r.stdout, re.MULTILINE), \
            f"{script} printed no line matching {pattern!r}:\n{r.stdout}\n{r.stderr[-2000:]}"


def test_the_scale_bench_says_where_it_stops():
    """A size this machine does not reach in the wait: the bench says how far it got and
    where the CPU went, by kind of process, exits 1 and leaves nothing behind."""
    r = subprocess.run([sys.executable, str(REPO / "bench" / "scale.py"), "--nodes", "1",
                        "--apps", "1", "--instances", "2", "--kill", "1", "--samples", "1"],
                       capture_output=True, text=True, timeout=300, cwd=REPO,
                       env={**os.environ, "SCALE_BENCH_WAIT": "0.01"})
    assert r.returncode == 1, r.stdout + r.stderr
    # which wait it stops in (the warm-up's or the measured one's) is the machine's pace
    assert re.search(rf"^STOPPED: .+: not reached in 0 s; \d+ of 2 tasks "
                     rf"running\. CPU s so far: Mesos agents {NUM} \(\d+%\), Mesos master "
                     rf"{NUM} .*agent daemons .*framework .*our executors {NUM}", r.stdout,
                     re.MULTILINE), r.stdout + r.stderr[-2000:]
    assert re.search(r"^left behind: nothing$", r.stdout, re.MULTILINE), r.stdout
