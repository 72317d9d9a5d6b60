"""A MIG device is owned as a whole GPU is: a stand-in executor (its own process)
prepares one and isolates its task; SIGKILLed, its container is released at once
(pidfd), its task process killed, and the MIG device is free again; the other
owner's MIG device on the same GPU is untouched. The real daemon, real cgroups."""
import json
import os
import subprocess
import sys

from localcluster import fake_nvml
from tests.bed import waiting
from tests.bed.agent_daemon import alive

OWNER = r"""
import json, subprocess, sys
from isolator.client import AgentClient
sock, cid, profile = sys.argv[1:4]
client = AgentClient(sock)
grant = client.prepare(cid, 1, "MESOS", mig_profile=profile)
child = subprocess.Popen(["sleep", "300"])
client.isolate(cid, pid=child.pid)
print(json.dumps({"key": sorted(client.info()["containers"][cid]["gpus"]),
                  "uuid": grant.gpus[0].uuid, "child": child.pid}), flush=True)
sys.stdin.read()
"""


def owner(sock, cid, profile):
    proc = subprocess.Popen([sys.executable, "-c", OWNER, str(sock), cid, profile],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    line = proc.stdout.readline()
    assert line, f"owner of {cid} failed (exit {proc.wait()})"
    return proc, json.loads(line)


def test_a_mig_device_ends_with_its_owner(tmp_path, daemon_factory, dev_dir):
    layout = fake_nvml.h200mig()
    agent = daemon_factory(layout, extra=["--reconcile_interval", "0.5",
                                          *layout.mig_bed(tmp_path / "proc", dev_dir)])
    sock = agent.work_dir / "agent.sock"
    free_before = sorted(agent.client.info()["free"])
    doomed, said = owner(sock, "doomed", "3g.71gb")
    stays, kept = owner(sock, "stays", "1g.18gb")
    assert said["uuid"].startswith("MIG-") and said["key"] != kept["key"]
    doomed.kill()
    doomed.wait()
    waiting.wait_until(lambda: set(agent.client.info()["containers"]) == {"stays"},
                       timeout=15, what="the dead owner's MIG device released")
    assert not alive(said["child"]) and alive(kept["child"])
    assert sorted(agent.client.info()["free"]) == sorted(set(free_before) - set(kept["key"]))
    assert agent.client.prepare("again", 1, mig_profile="3g.71gb").gpus[0].uuid == said["uuid"]
    agent.client.cleanup("again")
    stays.stdin.close()
    stays.wait(10)
    waiting.wait_until(lambda: agent.client.info()["containers"] == {}, timeout=15,
                       what="the last one released")
