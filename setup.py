"""mesos-gpu: GPU support for Apache Mesos (agent-side module, driver volume, framework)."""
from setuptools import find_packages, setup

setup(
    name="mesos-gpu",
    version="0.1.0",
    description="NVIDIA GPUs for Apache Mesos: driver volume, device isolation, "
                "a GPU-aware pymesos framework with a Marathon-style API",
    python_requires=">=3.11",
    # Every product package, the one-machine cluster the demo runs on included;
    # never tests/, bench/ or examples/ (examples/ only links to what ships here).
    packages=find_packages(include=["common", "volumes*", "isolator*", "framework*",
                                    "localcluster*", "mesos_gpu"]),
    package_data={
        # built on the user's machine by `python -m localcluster build`
        "localcluster": ["mesos_local/*.py", "mesos_local/*.cpp", "mesos_local/*.sh",
                         "mesos_local/*.md", "mesos_local/scripts/*", "fake_nvml/*.c",
                         "cuda_probe/*.c"],
        "localcluster.cognitive": ["apps/*.json", "jobs/*.json"],
        # the dashboard, served as it is (no build step)
        "framework.ui": ["static/*.html", "static/*.css", "static/*.svg", "static/js/*.js"],
    },
    install_requires=[
        # pymesos 0.3.15 pins http-parser 0.9.0, whose C extension does not build
        # on Python 3.11; install.sh installs its pure-Python parser first.
        "pymesos==0.3.15",
        "nvidia-ml-py>=12.535",
        "docker>=7.0",
        "addict>=2.4",
        "six>=1.16",
        # pymesos imports kazoo on Python 3 for zk:// masters.
        "kazoo>=2.9",
        # NVIDIA's real nvml.h: the one-machine cluster compiles its fake
        # libnvidia-ml against it on hosts without an NVIDIA driver.
        "nvidia-nvml-dev>=13.0",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-xdist>=3.5",      # pytest.ini runs the suite on two workers
            # tests/test_layout.py: pyflakes checks of the whole tree
            "ruff>=0.6",
            "hypothesis>=6.100",
            # A real, unmodified Marathon client (its last release) proves our API
            # answers the way existing Marathon clients expect.
            "marathon==0.13.0",
            # ... and a real, unmodified Metronome client proves the jobs API (/v1). Its
            # generated protobuf models predate protobuf 4's C++ descriptors.
            "dcos-metronome==0.3.0",
            "protobuf>=3.20,<4",
            # The example workload's model and its PTX check against NVIDIA's ptxas.
            "numpy>=1.24",
            "nvidia-cuda-nvcc-cu12>=12.0",
            # The dashboard's tests drive Debian's chromium (install.sh) through chromedriver.
            "selenium>=4.20",
            # The Prometheus project's own parser reads every /metrics endpoint.
            "prometheus_client>=0.17",
        ],
    },
    entry_points={"console_scripts": ["mesos-gpu = mesos_gpu.main:main"]},
)
