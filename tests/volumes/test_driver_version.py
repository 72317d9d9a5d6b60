"""Which driver a file belongs to: the version a library's name carries, and a
version in a binary's bytes found whole (never inside a longer number)."""
import pytest

from volumes.driver_version import contains_version, name_version, other_driver_string


@pytest.mark.parametrize("name, version", [
    ("libcuda.so.535.261.03", "535.261.03"), ("libnvidia-ml.so.470.57.01", "470.57.01"),
    ("libnvidia-tls.so.535.54", "535.54"), ("libcuda.so.1", None), ("libGL.so.1.7.0", None),
    ("libcuda.so", None), ("nvidia-smi", None)])
def test_a_library_name_carries_its_driver_version(name, version):
    assert name_version(name) == version


@pytest.mark.parametrize("content, found", [
    (b"\x7fELF\x00535.261.03\x00rest", True), (b"version 535.261.03", True),
    (b"12535.261.03\x00", False), (b"535.261.035\x00", False), (b"1.535.261.03", False),
    (b"535.216.03\x00", False), (b"", False)])
def test_a_version_in_the_bytes_counts_only_whole(tmp_path, content, found):
    path = tmp_path / "file"
    path.write_bytes(content)
    assert contains_version(path, b"535.261.03") is found


@pytest.mark.parametrize("content, version", [
    (b"\x7fELF\x00NVIDIA 470.57.01\x00rest", "470.57.01"),
    (b"\x00535.261.03\x00", "535.261.03"), (b"no version here\x00", None),
    (b"1.2.03\x00", None), (b"", None)])
def test_another_drivers_version_string_is_read_from_a_binary(tmp_path, content, version):
    path = tmp_path / "program"
    path.write_bytes(content)
    assert other_driver_string(path) == version
