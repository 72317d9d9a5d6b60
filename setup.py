"""mesos-gpu: GPU support for Apache Mesos (agent-side module, driver volume, framework)."""
from setuptools import setup

setup(
    name="mesos-gpu",
    version="0.1.0",
    description="NVIDIA GPUs for Apache Mesos: driver volume, device isolation, "
                "a GPU-aware pymesos framework with a Marathon-style API",
    python_requires=">=3.11",
    packages=["volumes", "isolator", "framework"],
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
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "hypothesis>=6.100",
            # NVIDIA's real nvml.h, for compiling the test bed's fake libnvidia-ml.
            "nvidia-nvml-dev>=13.0",
            # A real, unmodified Marathon client (its last release) proves our API
            # answers the way existing Marathon clients expect.
            "marathon==0.13.0",
            # The example workload's model and its PTX check against NVIDIA's ptxas.
            "numpy>=1.24",
            "nvidia-cuda-nvcc-cu12>=12.0",
        ],
    },
    entry_points={"console_scripts": ["mesos-gpu = framework.main:main"]},
)
