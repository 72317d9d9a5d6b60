"""Launch overhead of a GPU Docker task: our path against a plain `docker run`.

Both start the same image with the same command (`true`) on the same private
Docker engine, in the same run, interleaved:

- plain: create, start, wait, remove (what `docker run --rm IMAGE true` does);
- ours: what the executor does for a 1-GPU DOCKER task: the agent daemon's
  prepare (allocation + fsynced ledger), the CUDA/volume image rules, create
  with the granted devices and the read-only driver volume, the daemon's
  isolate (Docker id cross-checked by label), start, wait, remove, cleanup.

The engine is the one-machine cluster's (localcluster/docker_engine.py: its own dockerd,
vfs storage), the daemon runs over a fake K80 with the bed's real NVIDIA 535
files as its driver volume. Prints median and mean wall time per launch and
the ratio (target: at most 1.10). Never asserts. Needs root.

    .venv/bin/python bench/launch_overhead.py [--runs 15]
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from framework.executor.docker_container import DockerContainer, inspect  # noqa: E402
from framework.tasks.task_spec import TaskSpec  # noqa: E402
from isolator.api import DOCKER  # noqa: E402
from localcluster import fake_nvml  # noqa: E402
from localcluster.docker_engine import DockerEngine  # noqa: E402
from localcluster.gpu_node import GpuNode, layout_for_driver_files  # noqa: E402

VOLUME_LABEL = {"com.nvidia.volumes.needed": "nvidia_driver"}


def plain_run(client, image: str) -> None:
    container = client.containers.create(image, ["true"])
    container.start()
    container.wait()
    container.remove(force=True)


def our_run(client, docker_host: str, node: GpuNode, image: str, n: int) -> None:
    container_id = f"bench-launch-{n}"
    spec = TaskSpec(id=container_id, container="DOCKER", image=image, cmd=None, args=("true",),
                    gpus=1, cpus=0, mem=0)
    info = inspect(client, image, "bench")
    grant = node.client.prepare(container_id, 1, DOCKER)
    task = DockerContainer(spec, container_id, client, info, grant, {"MESOS_TASK_ID": container_id},
                           docker_host=docker_host)
    try:
        docker_id = task.create()
        node.client.isolate(container_id, docker_id=docker_id)
        task.container.start()            # as DockerContainer.start, without the log follower
        task.wait()
    finally:
        task.remove()
        node.client.cleanup(container_id)


def timed(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="launches of each kind (default 15)")
    args = parser.parse_args()
    print("launch overhead bench: starting a private dockerd and the agent daemon ...", flush=True)
    with DockerEngine() as engine:
        image = engine.make_image("bench/busybox:gpu", labels=VOLUME_LABEL, cmd="true")
        client = engine.client()
        layout = layout_for_driver_files(fake_nvml.k80(), "bench-k80")
        with GpuNode(layout, engine.host) as node:
            plain_run(client, image)                 # warm both paths once
            our_run(client, engine.host, node, image, -1)
            plain, ours = [], []
            for n in range(args.runs):
                plain.append(timed(plain_run, client, image))
                ours.append(timed(our_run, client, engine.host, node, image, n))
    p_med, o_med = statistics.median(plain), statistics.median(ours)
    p_mean, o_mean = statistics.mean(plain), statistics.mean(ours)
    print(f"runs per kind: {args.runs} (interleaved), image {image}")
    print(f"{'':>26} {'median':>10} {'mean':>10}")
    print(f"{'plain docker run':>26} {p_med * 1000:8.1f}ms {p_mean * 1000:8.1f}ms")
    print(f"{'ours (GPU, volume)':>26} {o_med * 1000:8.1f}ms {o_mean * 1000:8.1f}ms")
    print(f"{'ratio ours / plain':>26} {o_med / p_med:10.3f} {o_mean / p_mean:10.3f}"
          f"   (target <= 1.10)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
