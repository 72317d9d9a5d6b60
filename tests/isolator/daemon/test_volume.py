"""The daemon builds the read-only driver volume at start (volumes.builder, from
the real NVIDIA 535 files of the test bed) and hands it out with prepare."""
import os
from isolator.api import Volume

from localcluster import driver_files, fake_nvml


def _layout() -> fake_nvml.Layout:
    lay = fake_nvml.layout("k80")
    lay.name, lay.driver = "k80-535-261", driver_files.DRIVER_VERSION   # NVML says what the files are
    return lay


def test_prepare_hands_out_the_driver_volume(daemon_factory, tmp_path):
    root = driver_files.build()
    volume_root = tmp_path / "volumes"
    agent = daemon_factory(_layout(), extra=["--driver_volume", "build", "--driver_root",
                                             str(root), "--volume_root", str(volume_root)])
    name = f"nvidia_{driver_files.DRIVER_VERSION}"
    assert f"driver volume {name} at {volume_root / name} (built)" in agent.log()
    answer = agent.client.prepare("v1", 1)
    assert answer.volume == Volume(name, str(volume_root / name))
    assert os.path.exists(volume_root / name / "lib64" / "libnvidia-ml.so.1")
    assert agent.client.prepare("v0", 0).volume is None        # no GPU, no driver
    agent.stop()
    again = daemon_factory(_layout(), work_dir=agent.work_dir,
                           extra=["--driver_volume", "build", "--driver_root", str(root),
                                  "--volume_root", str(volume_root)])
    assert f"driver volume {name} at {volume_root / name} (reused)" in again.log()


def test_a_driver_root_without_nvidia_files_stops_the_daemon(daemon_factory, tmp_path):
    (tmp_path / "empty" / "etc").mkdir(parents=True)
    agent = daemon_factory(_layout(), start=False,
                           extra=["--driver_volume", "build", "--driver_root",
                                  str(tmp_path / "empty"), "--volume_root", str(tmp_path / "v")])
    assert agent.run_to_exit() == 2
    assert "mesos-gpu agent: error: " in agent.log()
    assert not (tmp_path / "v" / f"nvidia_{driver_files.DRIVER_VERSION}").exists()
