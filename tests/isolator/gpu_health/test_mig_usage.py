"""A MIG device's usage and metrics are its own, not its parent GPU's: the real daemon
reads them with unmodified pynvml from the fake NVML's MIG device handles
(nvmlDeviceGetMemoryInfo, nvmlDeviceGetComputeRunningProcesses), as on a real MIG
GPU; NVML gives no utilisation per MIG device, so none is reported for one."""
import functools

from localcluster import fake_nvml
from localcluster.fake_nvml.control import Control
from tests.bed import waiting
from tests.bed.prometheus import families
from tests.bed.agent_daemon import NO_SUCH_PID
from tests.bed.cgroups import new_prober

GIB = 2 ** 30
wait_until = functools.partial(waiting.wait_until, interval=0.05)


def test_a_mig_devices_usage_and_metrics_are_its_own(tmp_path, daemon_factory, dev_dir,
                                                     probers):
    layout = fake_nvml.h200mig()
    control = tmp_path / "nvml.control"
    agent = daemon_factory(layout, control=control,
                           extra=["--health_poll_interval", "0.2",
                                  *layout.mig_bed(tmp_path / "proc", dev_dir)])
    c = agent.client
    grant = c.prepare("task", 1, mig_profile="3g.71gb")
    (mine,) = grant.gpus
    task = new_prober(probers)
    c.isolate("task", pid=task.pid)
    sibling = next(d for d in layout.mig[0].devices if d.uuid != mine.uuid)
    nvml = Control(control)
    nvml.mig_process(0, mine.gpu_instance_id, mine.compute_instance_id, task.pid, 5 * GIB)
    nvml.mig_process(0, sibling.gi, sibling.ci, NO_SUCH_PID, 1 * GIB)   # another instance's
    nvml.utilization(0, 90, 40)                                         # the whole GPU's

    u = c.usage("task")
    (g,) = u.gpus
    assert g.uuid == mine.uuid and g.index == 0 and g.minor == 0
    assert g.memory_used == 5 * GIB and g.memory_total == 71424 * 2**20   # 3g.71gb's own
    assert g.gpu_utilization is None and g.memory_utilization is None     # none per instance
    assert [(p.pid, p.memory_used, p.in_container) for p in g.processes] == \
        [(task.pid, 5 * GIB, True)]                                       # not the sibling's
    assert u.task_memory_used == 5 * GIB and u.gpus[0].task_sm_utilization is None

    def fb_used():
        fams = families(c.metrics())
        return {s.labels.get("GPU_I_ID"): s.value for s in fams["DCGM_FI_DEV_FB_USED"].samples
                if s.labels["gpu"] == "0"}
    wait_until(lambda: fb_used().get(str(mine.gpu_instance_id)) == 5 * 1024, timeout=10,
               what="the MIG device's own memory in the metrics")
    fams = families(c.metrics())
    used = fb_used()
    assert used[str(sibling.gi)] == 1024 and used[str(mine.gpu_instance_id)] == 5 * 1024
    totals = {s.labels["GPU_I_ID"]: s.value for s in fams["DCGM_FI_DEV_FB_TOTAL"].samples
              if "GPU_I_ID" in s.labels}
    assert totals[str(mine.gpu_instance_id)] == 71424 and totals[str(sibling.gi)] == 16384
    util = [s.labels for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples]
    assert not any("GPU_I_ID" in labels for labels in util)             # none per instance
    assert [s.value for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples if s.labels["gpu"] == "1"]
    temps = [s for s in fams["DCGM_FI_DEV_GPU_TEMP"].samples if "GPU_I_ID" in s.labels]
    assert len(temps) == 4                         # the parent's figure, on each instance
    (row,) = [s for s in fams["mesos_gpu_task_gpu_memory_used_bytes"].samples
              if s.labels["container_id"] == "task"]
    assert row.value == 5 * GIB and row.labels["GPU_I_ID"] == str(mine.gpu_instance_id)
    assert not [s for s in fams["mesos_gpu_task_gpu_utilization_percent"].samples
                if s.labels["container_id"] == "task"]     # unknown on a MIG device, not 0

    nvml.mig_process_gone(0, mine.gpu_instance_id, mine.compute_instance_id, task.pid)
    assert c.usage("task").gpus[0].memory_used == 0
    c.cleanup("task")
