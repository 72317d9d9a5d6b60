"""`mesos-gpu migrate-state`: move a framework's SQLite state (`--state_dir`)
into ZooKeeper (`--zk`), for a framework that goes from one instance to several.

Run once, with the framework stopped (its tasks keep running: the instances
started with `--zk` afterwards subscribe as the same framework and find them):

1. the SQLite state is locked (no framework may run on it) and opened, which
   brings it to the current layout;
2. this command joins the election on the ZooKeeper path and must win it at
   once: framework instances running there are refused by name (stop them);
3. the state there, if any, must be empty of apps, groups below the root,
   deployments, tasks and framework id (else refused: it would be replaced);
4. every record and the framework id are written in ONE transaction of the
   ZooKeeper store (journalled if big): all of it or none.

The SQLite file is left as it was (a backup). The API credentials of
`<state_dir>/http_credentials` are not moved: instances of several share
credentials given on their command line.
"""
import argparse
import json
import logging
import os
import threading
from pathlib import Path

from common import instance_lock
from common.errors import UserError
from framework.ha.election import ZooKeeperElection
from framework.process import high_availability
from framework.process.high_availability import ZkSettings, connect
from framework.state.state_store import DB_NAME, StateStore
from framework.state.zk_store import ZooKeeperStore

log = logging.getLogger(__name__)

LOCK_NAME = "framework.lock"
# What a state that was never used holds: the layout marker, the root group.
EMPTY_KINDS = {"store", "group", "group_version:/"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state_dir", required=True, metavar="DIR",
                   help="the SQLite state of `mesos-gpu framework --state_dir DIR` (stopped)")
    high_availability.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    if not args.zk:
        raise UserError("--zk is required: where the state goes (zk://HOST:PORT[,...]/PATH)")
    settings = ZkSettings.from_args(args)
    state_dir = Path(args.state_dir)
    if not (state_dir / DB_NAME).is_file():
        raise UserError(f"--state_dir {state_dir}: no framework state there ({DB_NAME} missing)")
    try:
        lock_fd = instance_lock.hold(str(state_dir / LOCK_NAME))
    except instance_lock.Held as e:
        raise UserError(f"--state_dir {state_dir}: a framework (pid {e.pid}) runs on it: stop "
                        f"it first (its tasks keep running)") from None
    try:
        sqlite = StateStore(state_dir)
        try:
            records = sqlite.snapshot()
        finally:
            sqlite.close()
        summary = transfer(records, settings)
    finally:
        os.close(lock_fd)
    print(f"moved the state of {state_dir} to {settings.url}: {summary}. The SQLite file is "
          f"left as it was. Start each instance with --zk {settings.url} and the same "
          f"--http_credentials or --http_token_file (the credentials in {state_dir} are not "
          f"moved).")
    return 0


def transfer(records: dict, settings: ZkSettings) -> str:
    """Write `records` (a StateStore snapshot) into the ZooKeeper state, as the
    only contender of its election; returns what was moved, in words."""
    client = connect(settings)
    election = ZooKeeperElection(client, settings.url, lambda: "mesos-gpu migrate-state",
                                 settings.session_timeout)
    try:
        client.ensure_path(election.election_path)
        running = client.Lock(election.election_path).contenders()
        if running:
            raise UserError(f"--zk {settings.url}: framework instances run there (leader "
                            f"{running[0]}; {len(running)} in all): stop them all first")
        elected = threading.Event()
        election.on_elected(elected.set)
        election.start()
        if not elected.wait(settings.session_timeout * 3):
            raise UserError(f"--zk {settings.url}: could not lead its election (an instance "
                            f"started meanwhile?): nothing was written")
        store = ZooKeeperStore(client, settings.url, election.fence, election.fenced,
                               settings.max_node_size, settings.compression_threshold)
        store.load()
        there = {kind: len(keys) for kind, keys in store.snapshot().items()
                 if kind not in EMPTY_KINDS | {"meta"} and keys}
        groups = len(set(store.items("group")) - {"/"})
        if there or groups or store.framework_id():
            what = [f"{there.pop(kind, 0)} {kind}s" for kind in ("app", "deployment", "task")]
            what += [f"{groups} groups", f"{sum(there.values())} other records",
                     f"framework id {store.framework_id() or 'none'}"]
            raise UserError(f"--zk {settings.url}: a state is there already ({', '.join(what)})"
                            f": not replaced; migrate into a new path")
        framework_id = records.get("meta", {}).get("framework_id")
        with store.transaction():
            for kind in EMPTY_KINDS:            # the defaults the empty state was given
                for key in store.items(kind):
                    store.delete(kind, key)
            for kind, by_key in records.items():
                if kind == "meta":
                    continue
                for key, text in by_key.items():
                    store.put(kind, key, json.loads(text))
            if framework_id:
                store.set_framework_id(framework_id)
        counts = {kind: len(by_key) for kind, by_key in records.items() if kind != "meta"}
        log.info("state moved: %s", counts)
        return (f"{counts.get('app', 0)} apps, {counts.get('group', 0)} groups, "
                f"{counts.get('deployment', 0)} deployments, {counts.get('task', 0)} tasks, "
                f"framework id {framework_id or 'none'}")
    finally:
        election.stop()
        client.stop()
        client.close()
        election.join()
