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

Cold row: the same two paths for an image that is not on the agent and must
come from a registry (localcluster/registry.py, the real Distribution registry
on 127.0.0.1, a layer of --layer_mb random MB above the busybox base), removed
from the engine before every launch:

- plain: what `docker pull IMAGE && docker run --rm IMAGE true` asks the engine
  (POST /images/create, then the plain run above);
- ours: the executor's pull (framework/executor/image_pull.py: the registry's
  manifest and config read, the CUDA check, the engine's pull followed for
  progress), then our launch above.

    .venv/bin/python bench/launch_overhead.py [--runs 15] [--cold_runs 5] [--layer_mb 20]
"""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from framework.executor.docker_container import DockerContainer, inspect  # noqa: E402
from framework.executor.image_pull import ImagePull  # noqa: E402
from framework.tasks.task_spec import TaskSpec  # noqa: E402
from isolator.api import DOCKER  # noqa: E402
from localcluster import fake_nvml  # noqa: E402
from localcluster.docker_engine import DockerEngine  # noqa: E402
from localcluster.gpu_node import GpuNode, layout_for_driver_files  # noqa: E402
from localcluster.registry import Registry  # noqa: E402

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


def plain_cold(client, image: str) -> None:
    repository, _, tag = image.rpartition(":")
    client.api.pull(repository, tag=tag)         # what `docker pull` asks the engine
    plain_run(client, image)


def our_cold(client, docker_host: str, node: GpuNode, image: str, n: int) -> None:
    spec = TaskSpec(id=f"bench-cold-{n}", container="DOCKER", image=image, args=("true",),
                    gpus=1, cpus=0, mem=0)
    inventory = node.client.info().get("inventory") or {}
    ImagePull(client, spec, "bench", 600, lambda message: None, lambda: inventory).run()
    our_run(client, docker_host, node, image, n)


def forget_if_there(client, image: str) -> None:
    try:
        forget(client, image)
    except Exception:
        pass


def forget(client, image: str) -> None:
    """The image and its own layers out of the engine (the busybox base stays)."""
    client.api.remove_image(image, force=True)


def timed(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="launches of each kind (default 15)")
    parser.add_argument("--cold_runs", type=int, default=5,
                        help="launches of each kind with the image pulled first (default 5)")
    parser.add_argument("--layer_mb", type=float, default=20.0,
                        help="size of the cold image's own layer in MB (default 20)")
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
            with Registry() as registry:
                registry.push_image("bench/cold", "1", labels=VOLUME_LABEL, cmd=["true"],
                                    files={"layer.bin": os.urandom(int(args.layer_mb * 1e6))})
                cold_image = registry.reference("bench/cold", "1")
                forget_if_there(client, cold_image)
                plain_cold(client, cold_image)           # warm both cold paths once
                forget(client, cold_image)
                our_cold(client, engine.host, node, cold_image, -1)
                forget(client, cold_image)
                plain_cold_s, ours_cold_s = [], []
                for n in range(args.cold_runs):          # which goes first alternates
                    for kind in ((0, 1) if n % 2 == 0 else (1, 0)):
                        if kind == 0:
                            plain_cold_s.append(timed(plain_cold, client, cold_image))
                        else:
                            ours_cold_s.append(timed(our_cold, client, engine.host, node,
                                                     cold_image, n))
                        forget(client, cold_image)
    p_med, o_med = statistics.median(plain), statistics.median(ours)
    p_mean, o_mean = statistics.mean(plain), statistics.mean(ours)
    print(f"runs per kind: {args.runs} (interleaved), image {image}")
    print(f"{'':>26} {'median':>10} {'mean':>10}")
    print(f"{'plain docker run':>26} {p_med * 1000:8.1f}ms {p_mean * 1000:8.1f}ms")
    print(f"{'ours (GPU, volume)':>26} {o_med * 1000:8.1f}ms {o_mean * 1000:8.1f}ms")
    print(f"{'ratio ours / plain':>26} {o_med / p_med:10.3f} {o_mean / p_mean:10.3f}"
          f"   (target <= 1.10)")
    pc_med, oc_med = statistics.median(plain_cold_s), statistics.median(ours_cold_s)
    pc_mean, oc_mean = statistics.mean(plain_cold_s), statistics.mean(ours_cold_s)
    print(f"cold: image pulled first from a local registry ({args.layer_mb:g} MB layer), "
          f"{args.cold_runs} runs per kind (interleaved, alternating first)")
    print(f"{'plain docker pull + run':>26} {pc_med * 1000:8.1f}ms {pc_mean * 1000:8.1f}ms")
    print(f"{'ours (pull, GPU, volume)':>26} {oc_med * 1000:8.1f}ms {oc_mean * 1000:8.1f}ms")
    print(f"{'ratio cold ours / plain':>26} {oc_med / pc_med:10.3f} {oc_mean / pc_mean:10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
