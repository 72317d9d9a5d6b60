"""Driver volume build: hard links (volumes.builder) against `cp -a` of the same
files (what Mesos does), reuse of an existing volume against a first build, and
the same on a host with two 535 releases (the other driver's files beside the
running one's: every file's version checked).

    .venv/bin/python bench/volume_build.py [--runs 7]

Uses the test bed's real NVIDIA 535 tree (built if missing). Every figure is a
median over --runs fresh runs, the two sides alternated, measured in this
process, page cache warm and no dirty data at the start of each run (the
builder fsyncs; cp -a, like Mesos, does not). Prints; never asserts. Targets:
hard links >= 10x faster than cp -a; reuse < 10 ms; on the two-version host,
the same, and the version checks cost little next to a one-version build.
"""
import argparse
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localcluster import driver_files  # noqa: E402
from localcluster.paths import BUILD_DIR  # noqa: E402
from volumes import builder, components  # noqa: E402


def timed_ms(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return 1000 * (time.perf_counter() - started)


def inode_cost_us(scratch: Path, n: int = 100) -> float:
    """Microseconds per symlink creation on this filesystem: a volume has about
    25 soname links and 4 directories, in both builds alike."""
    d = scratch / "probe"
    d.mkdir()
    started = time.perf_counter()
    for i in range(n):
        os.symlink("x", d / f"l{i}")
    cost = 1e6 * (time.perf_counter() - started) / n
    shutil.rmtree(d)
    return cost


def cp_a(comps: components.Components, dest: Path) -> None:
    """The same files and links with cp -a, one cp per directory (a kind baseline:
    Mesos runs one copy per file)."""
    for sub in ("bin", "lib", "lib64"):
        (dest / sub).mkdir(parents=True)
    groups = {"bin": [str(b.source) for b in comps.binaries]}
    for lib in comps.libraries:
        groups.setdefault(lib.directory, []).append(str(lib.source))
    for sub, files in groups.items():
        subprocess.run(["cp", "-a", *files, str(dest / sub)], check=True)
    for lib in comps.libraries:
        for link in lib.links:
            os.symlink(lib.filename, dest / lib.directory / link)


def rmtree(path: Path) -> None:
    """Remove a volume (its 0555 directories made writable first)."""
    for dirpath, _, _ in os.walk(path):
        os.chmod(dirpath, 0o755)
    shutil.rmtree(path, ignore_errors=True)


def measure(root: Path, version: str, work: Path, runs: int, label: str) -> float:
    """Print build, cp -a and reuse figures for one host; returns the build median."""
    comps = components.gather(root, driver_version=version)
    hard, cp = [], []
    for _ in range(runs):          # alternated, so background load hits both
        rmtree(work / "v")
        rmtree(work / "cp")
        # Each side starts with no dirty data: otherwise the builder's fsync
        # would wait for the last cp's 280 MB to reach the disk.
        os.sync()
        hard.append(timed_ms(lambda: builder.build(version, root, work / "v")))
        os.sync()
        cp.append(timed_ms(lambda: cp_a(comps, work / "cp")))
    hard_ms, cp_ms = statistics.median(hard), statistics.median(cp)
    method = builder.build(version, root, work / "v").manifest["method"]
    print(f"[{label}] build, volumes.builder ({method}):    {hard_ms:8.1f} ms   "
          f"(min {min(hard):.1f}, max {max(hard):.1f})")
    print(f"[{label}] cp -a of the same files (Mesos-like): {cp_ms:8.1f} ms   "
          f"(min {min(cp):.1f}, max {max(cp):.1f})")
    print(f"[{label}] ratio cp -a / builder:                {cp_ms / hard_ms:8.1f} x   "
          f"(target >= 10x)")
    reuse = statistics.median(timed_ms(lambda: builder.build(version, root, work / "v"))
                              for _ in range(max(runs, 20)))
    assert builder.build(version, root, work / "v").reused
    print(f"[{label}] reuse of the existing volume:         {reuse:8.2f} ms   (target < 10 ms; "
          f"{hard_ms / reuse:.0f}x faster than a first build)")
    rmtree(work / "v")
    rmtree(work / "cp")
    return hard_ms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="runs per measurement (median)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)    # the two-version host's warning, once per build

    root = driver_files.build()
    version = driver_files.DRIVER_VERSION
    comps = components.gather(root, driver_version=version)
    size = sum(s.stat().st_size for s in comps.sources())
    work = Path(tempfile.mkdtemp(prefix="bench-volume-", dir=BUILD_DIR))
    same_fs = os.stat(work).st_dev == os.stat(root).st_dev
    print(f"driver tree {root}: {len(comps.sources())} files, {size / 2**20:.0f} MiB; "
          f"scratch {work} ({'same' if same_fs else 'another'} filesystem); runs={args.runs}")
    try:
        one = measure(root, version, work, args.runs, "one driver")
        print(f"symlink creation on this filesystem:  {inode_cost_us(work):8.0f} us each "
              f"(about 35 per volume, paid by both)")
        two = driver_files.two_version_host(work / "two-versions", "two-directories")
        others = len(components.gather(two, driver_version=version).other_versions)
        print(f"two-version host {two}: {driver_files.OLD_DRIVER_VERSION} in a second cache "
              f"directory listed first, beside {version} "
              f"(the cache names {others} files of the other driver)")
        both = measure(two, version, work, args.runs, "two drivers")
        print(f"two drivers / one driver, build:      {both / one:8.2f} x   "
              f"(the cost of checking every file's version)")
        scans = [timed_ms(lambda: components.gather(r, driver_version=version))
                 for r in (root, two) for _ in range(args.runs)]
        print(f"gather only, one / two drivers:       {statistics.median(scans[:args.runs]):8.1f} / "
              f"{statistics.median(scans[args.runs:]):.1f} ms")
    finally:
        rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
