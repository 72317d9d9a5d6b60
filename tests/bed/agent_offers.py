"""A GPU agent's offer as the master sends it (v1 JSON, with the attributes
`mesos-gpu agent flags` gives) and a task record on it: the nodes view's and the
dashboard's tests build the framework's knowledge from these."""
from framework.scheduling.task_record import TaskRecord
from framework.tasks.task_spec import TaskSpec

ATTRIBUTES = {"gpu_type": "tesla_v100", "gpu_model": "tesla_v100_sxm2_16gb",
              "gpu_types": "tesla_v100", "gpu_memory_mb": 16160.0,
              "gpu_compute_capability": "7.0", "nvidia_driver": "535.54.03",
              "cuda_driver": "12.2", "platform_features": "nvidia-535-54/cuda-12-2/nv-compute-7-0"}
UUIDS = [f"GPU-{n:08x}-aaaa-bbbb-cccc-{n:012x}" for n in range(8)]


def offer(agent="agent-1", host="gpu-a", gpus=4, n=0, domain=False):
    attributes = [{"name": k, "type": "SCALAR", "scalar": {"value": v}} if isinstance(v, float)
                  else {"name": k, "type": "TEXT", "text": {"value": v}}
                  for k, v in ATTRIBUTES.items()]
    resources = [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 8.0}, "role": "*"},
                 {"name": "mem", "type": "SCALAR", "scalar": {"value": 4096.0}, "role": "*"}]
    if gpus:
        resources.append({"name": "gpus", "type": "SCALAR", "scalar": {"value": float(gpus)},
                          "role": "*"})
    out = {"id": {"value": f"offer-{agent}-{n}"}, "agent_id": {"value": agent}, "hostname": host,
           "framework_id": {"value": "fw"}, "resources": resources, "attributes": attributes}
    if domain:
        out["domain"] = {"fault_domain": {"region": {"name": "eu"}, "zone": {"name": "eu-1a"}}}
    return out


def task(task_id, agent="agent-1", host="gpu-a", gpus=1, uuids=(), state="TASK_RUNNING",
         app="/train"):
    return TaskRecord(spec=TaskSpec(id=task_id, app_id=app, gpus=gpus, cmd="true"), state=state,
                      mesos_task_id=task_id, agent_id=agent, hostname=host, gpus=list(uuids),
                      app_version="v1")
