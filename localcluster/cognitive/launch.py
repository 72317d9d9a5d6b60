#!/usr/bin/env python3
"""Launch the cognitive workload through a Marathon-style API and watch it run.

    python -m localcluster.cognitive.launch --api http://127.0.0.1:8080 --container both --wait 120 --delete

Submits the app definitions in apps/ (`POST /v2/apps`), then polls
`GET /v2/apps/{id}` and `GET /v2/apps/{id}/tasks` and prints progress: tasks
staged, running and healthy, the agent each runs on, the GPUs it was granted
(when the API reports them, as mesos-gpu does with `?gpus=true`) and its
health check results. The inference service is ready when all its instances
run and pass their health check; the training job is done when a run of it
has finished (Marathon then starts it again: delete the app, or use --delete). Works with Marathon itself too, except that Marathon refuses GPUs
in DOCKER containers. Standard library only; copy it anywhere.

Exit status: 0 when every app got where it should within --wait, 1 when not,
2 on an error (API unreachable, app refused; apps created by this run are then
deleted again).
"""
import argparse
import base64
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

APPS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "apps")
WORKLOADS = ("inference", "training")
CONTAINERS = ("docker", "mesos")
POLL_SECONDS = 1.0
HTTP_TIMEOUT = 10.0


class LaunchError(Exception):
    """Something the user must fix; printed as one message (with details), exit 2."""


class ApiError(LaunchError):
    def __init__(self, method: str, path: str, status: int, body: Any):
        self.status, self.body = status, body
        message = body.get("message") if isinstance(body, dict) else None
        lines = [f"{method} {path}: HTTP {status}" + (f": {message}" if message else "")]
        if isinstance(body, dict):
            for detail in body.get("details") or []:
                errors = detail.get("errors") or []
                lines.append(f"  {detail.get('path', '/')}: {'; '.join(map(str, errors))}")
            for deployment in body.get("deployments") or []:
                lines.append(f"  locked by deployment {deployment.get('id')}")
        elif body:
            lines.append(f"  {str(body)[:500]}")
        super().__init__("\n".join(lines))


class Api:
    """A minimal Marathon v2 client over urllib (JSON in, JSON out)."""

    def __init__(self, base: str, auth: Optional[str] = None, token: Optional[str] = None):
        parsed = urllib.parse.urlparse(base)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise LaunchError(f"--api: expected http://HOST:PORT, got {base!r}")
        self.base = base.rstrip("/")
        self.headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if auth:
            if ":" not in auth:
                raise LaunchError("--auth: expected USER:PASSWORD")
            self.headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
        elif token:
            self.headers["Authorization"] = f"Bearer {token}"

    def call(self, method: str, path: str, body: Any = None) -> Tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
                return response.status, _json_or_text(response.read())
        except urllib.error.HTTPError as e:
            raise ApiError(method, path, e.code, _json_or_text(e.read())) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise LaunchError(f"cannot reach the API at {self.base} ({reason}); is "
                              f"`mesos-gpu framework` (or Marathon) running there?") from None

    def app_path(self, app_id: str) -> str:
        return "/v2/apps/" + urllib.parse.quote(app_id.strip("/"))


def _json_or_text(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace").strip()


def load_apps(names: Sequence[str], containers: Sequence[str], apps_dir: str,
              image: Optional[str], gpus: Optional[float] = None) -> List[dict]:
    """The app definitions to submit, `image` replacing their Docker image and `gpus`
    their GPUs per instance when given."""
    apps = []
    for container in containers:
        for name in names:
            path = os.path.join(apps_dir, f"{name}-{container}.json")
            try:
                with open(path) as f:
                    app = json.load(f)
            except OSError as e:
                raise LaunchError(f"cannot read {path}: {e.strerror}") from None
            except ValueError as e:
                raise LaunchError(f"{path}: not valid JSON ({e})") from None
            if not isinstance(app, dict) or not isinstance(app.get("id"), str):
                raise LaunchError(f"{path}: expected an app object with a string \"id\"")
            if image:
                app.setdefault("container", {}).setdefault("docker", {})["image"] = image
            if gpus is not None:
                app["gpus"] = gpus
            apps.append(app)
    return apps


@dataclass
class Watch:
    """What we know about one submitted app, updated by each poll."""
    app: dict
    created: bool = False
    instances: int = 1
    staged: int = 0
    running: int = 0
    healthy: int = 0
    unhealthy: int = 0
    tasks: Dict[str, dict] = field(default_factory=dict)    # id -> last seen task JSON
    announced: Set[str] = field(default_factory=set)        # running tasks already printed
    health_seen: Dict[str, Optional[bool]] = field(default_factory=dict)  # id -> last health printed
    finished: int = 0
    failed: int = 0
    failed_ids: Set[str] = field(default_factory=set)
    last_failure: Optional[Tuple[Any, Any]] = None          # (taskId, timestamp) seen last
    polled: bool = False
    gone: bool = False

    @property
    def id(self) -> str:
        return "/" + self.app["id"].strip("/")

    @property
    def batch(self) -> bool:
        return self.app.get("labels", {}).get("workload") == "training"

    @property
    def checked(self) -> bool:
        return bool(self.app.get("healthChecks"))

    @property
    def done(self) -> bool:
        if self.batch:
            return self.finished > 0
        if self.checked:
            return self.instances > 0 and self.healthy >= self.instances
        return self.instances > 0 and self.running >= self.instances

    def summary(self) -> str:
        name = "/".join(self.id.strip("/").split("/")[-2:])
        if self.gone:
            return f"{name}: gone"
        text = f"{name}: {self.running}/{self.instances} running"
        if self.checked:
            text += f", {self.healthy} healthy"
            if self.unhealthy:
                text += f", {self.unhealthy} unhealthy"
        if self.staged:
            text += f", {self.staged} staged"
        if self.batch:
            text += f", {self.finished} finished"
        if self.failed:
            text += f", {self.failed} failed"
        return text


def task_health(task: dict) -> Optional[bool]:
    """None: no health check result yet; else whether every result is alive."""
    results = [r for r in task.get("healthCheckResults") or [] if isinstance(r, dict)]
    if not results:
        return None
    return all(r.get("alive") for r in results)


def describe_health(task: dict) -> str:
    healthy = task_health(task)
    if healthy is None:
        return "health: not checked yet"
    if healthy:
        return "healthy"
    causes = [r.get("lastFailureCause") for r in task.get("healthCheckResults") or []
              if isinstance(r, dict) and not r.get("alive") and r.get("lastFailureCause")]
    failures = max((int(r.get("consecutiveFailures") or 0)
                    for r in task.get("healthCheckResults") or [] if isinstance(r, dict)), default=0)
    return f"UNHEALTHY ({failures} failed in a row" + (f": {causes[0]})" if causes else ")")


def describe_task(task: dict) -> str:
    gpus = task.get("gpuUuids")
    where = task.get("host") or "?"
    if task.get("slaveId"):
        where += f" (agent {task['slaveId']})"
    text = f"task {task.get('id')} {task.get('state', '?')} on {where}"
    if task.get("ports"):
        text += f", ports {','.join(str(p) for p in task['ports'])}"
    if gpus is not None:
        text += f", GPUs: {', '.join(gpus) if gpus else 'none'}"
    return text


def poll(api: Api, watch: Watch, say) -> None:
    """Refresh one app's tasks and counts; print each task's start, end or failure once."""
    try:
        # Tasks first, then the app: a task that has left the listing by now has
        # its failure (if it failed) already in the app's lastTaskFailure.
        _, listing = api.call("GET", api.app_path(watch.id) + "/tasks?gpus=true")
        _, body = api.call("GET", api.app_path(watch.id))
    except ApiError as e:
        if e.status == 404:
            watch.gone = True
            return
        raise
    app = (body or {}).get("app", {})
    watch.instances = int(app.get("instances", watch.instances))
    watch.staged, watch.running = int(app.get("tasksStaged", 0)), int(app.get("tasksRunning", 0))
    watch.healthy = int(app.get("tasksHealthy", 0))
    watch.unhealthy = int(app.get("tasksUnhealthy", 0))
    failure = app.get("lastTaskFailure") or {}
    key = (failure.get("taskId"), failure.get("timestamp")) if failure else None
    if key and key != watch.last_failure:
        if watch.created or watch.polled:      # not a failure from before this run
            watch.failed += 1
            watch.failed_ids.add(str(failure.get("taskId")))
            say(f"{watch.id}: task {failure.get('taskId')} failed: {failure.get('state', '?')}"
                + (f" on {failure['host']}" if failure.get("host") else "")
                + (f": {failure['message']}" if failure.get("message") else ""))
        watch.last_failure = key
    current = {t["id"]: t for t in (listing or {}).get("tasks", []) if isinstance(t, dict) and "id" in t}
    for task_id, task in current.items():
        if task.get("state") == "TASK_RUNNING" and task_id not in watch.announced:
            watch.announced.add(task_id)
            say(f"{watch.id}: {describe_task(task)}")
        health = task_health(task)
        if watch.checked and health is not None and watch.health_seen.get(task_id) != health:
            watch.health_seen[task_id] = health
            say(f"{watch.id}: task {task_id} {describe_health(task)}")
    for task_id in set(watch.tasks) - set(current) - watch.failed_ids:
        watch.finished += 1
        say(f"{watch.id}: task {task_id} ended" + (" (training run finished)" if watch.batch else ""))
    watch.tasks = current
    watch.polled = True


class Progress:
    """One status line: rewritten in place on a terminal, printed on change otherwise."""

    def __init__(self, stream=sys.stdout):
        self.stream, self.tty, self.last, self.last_text = stream, stream.isatty(), "", ""

    def show(self, elapsed: float, text: str) -> None:
        line = f"[{elapsed:5.0f}s] {text}"
        if self.tty:
            self.stream.write("\r\033[K" + line)
        elif text != self.last_text:             # a log gets a line per change only
            self.stream.write(line + "\n")
        self.stream.flush()
        self.last, self.last_text = line, text

    def say(self, text: str) -> None:
        if self.tty and self.last:
            self.stream.write("\r\033[K")
        self.stream.write(text + "\n")
        if self.tty and self.last:
            self.stream.write(self.last)
        self.stream.flush()

    def end(self) -> None:
        if self.tty and self.last:
            self.stream.write("\n")
            self.stream.flush()


def submit(api: Api, apps: List[dict], say) -> List[Watch]:
    """POST each app; an app that already exists is watched as it is. On a refusal, the
    apps this run created are deleted again and the error is raised."""
    watches: List[Watch] = []
    try:
        for app in apps:
            watch = Watch(app, instances=int(app.get("instances", 1)))
            try:
                _, body = api.call("POST", "/v2/apps", app)
                deployment = ((body or {}).get("deployments") or [{}])[0].get("id")
                watch.created = True
                say(f"submitted {watch.id} ({app.get('container', {}).get('type', 'MESOS')}, "
                    f"{app.get('gpus', 0)} GPU, image {app.get('container', {}).get('docker', {}).get('image')})"
                    + (f", deployment {deployment}" if deployment else ""))
            except ApiError as e:
                if e.status != 409:
                    raise
                say(f"{watch.id} already exists: watching it as it is (delete it to resubmit)")
            watches.append(watch)
    except LaunchError:
        delete(api, [w for w in watches if w.created], say, wait=0)
        raise
    return watches


def delete(api: Api, watches: List[Watch], say, wait: float = 30.0) -> None:
    """DELETE each app, then wait (bounded) until the API no longer lists it."""
    for watch in watches:
        try:
            api.call("DELETE", api.app_path(watch.id))
            say(f"deleted {watch.id}")
        except ApiError as e:
            if e.status != 404:
                say(f"could not delete {watch.id}: {e}")
    deadline = time.monotonic() + wait
    pending = list(watches)
    while pending and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS / 2)
        still = []
        for watch in pending:
            try:
                api.call("GET", api.app_path(watch.id))
                still.append(watch)
            except ApiError as e:
                if e.status != 404:
                    still.append(watch)
        pending = still
    for watch in pending:
        say(f"{watch.id} is still listed after {wait:g} s")


def watch_until(api: Api, watches: List[Watch], wait: float, progress: Progress) -> bool:
    """Poll until every app is done or `wait` seconds pass; True when all are done."""
    start = time.monotonic()
    while True:
        for watch in watches:
            poll(api, watch, progress.say)
        elapsed = time.monotonic() - start
        progress.show(elapsed, " | ".join(w.summary() for w in watches))
        if all(w.done for w in watches) or elapsed >= wait:
            progress.end()
            return all(w.done for w in watches)
        time.sleep(POLL_SECONDS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m localcluster.cognitive.launch", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Build the image first: python -m localcluster.cognitive.image build --docker-host unix:///...")
    parser.add_argument("--api", required=True,
                        help="base URL of the Marathon-style API, e.g. http://127.0.0.1:8080")
    parser.add_argument("--apps", default="inference,training",
                        help="comma-separated workloads to launch: inference, training [%(default)s]")
    parser.add_argument("--container", choices=CONTAINERS + ("both",), default="docker",
                        help="DOCKER containers, unified MESOS containers with the same "
                             "image, or both (each app once per kind) [%(default)s]")
    parser.add_argument("--wait", type=float, default=60.0, metavar="SECONDS",
                        help="watch progress this long at most; 0 submits and returns "
                             "[%(default)s]")
    parser.add_argument("--delete", action="store_true",
                        help="delete the apps at the end (also on Ctrl-C or timeout)")
    parser.add_argument("--image", help="use this Docker image instead of the one in the app files")
    parser.add_argument("--gpus", type=gpus_value, metavar="N",
                        help="GPUs per instance instead of the app files' 1: a whole number, "
                             "or a share of one GPU such as 0.25 (the node must share GPUs: "
                             "mesos-gpu agent --shared_gpus)")
    parser.add_argument("--apps-dir", default=APPS_DIR,
                        help="folder with <workload>-<container>.json files [%(default)s]")
    auth = parser.add_mutually_exclusive_group()
    auth.add_argument("--auth", metavar="USER:PASSWORD", default=os.environ.get("MARATHON_AUTH"),
                      help="HTTP basic credentials [$MARATHON_AUTH]")
    auth.add_argument("--token", default=os.environ.get("MARATHON_TOKEN"),
                      help="bearer token [$MARATHON_TOKEN]")
    return parser


def gpus_value(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of GPUs, got {text!r}") from None
    if not (0 < value < 1 or (value >= 0 and value.is_integer())):
        raise argparse.ArgumentTypeError(f"{text}: a whole number of GPUs, or a share of "
                                         "one GPU between 0 and 1")
    return int(value) if value.is_integer() else value


def parse_workloads(text: str) -> List[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in WORKLOADS]
    if not names or unknown:
        raise LaunchError(f"--apps: expected a comma-separated subset of {', '.join(WORKLOADS)}, "
                          f"got {text!r}")
    return list(dict.fromkeys(names))


def run(args: argparse.Namespace) -> int:
    if args.wait < 0:
        raise LaunchError("--wait: expected 0 or more seconds")
    containers = CONTAINERS if args.container == "both" else (args.container,)
    apps = load_apps(parse_workloads(args.apps), containers, args.apps_dir, args.image,
                     args.gpus)
    api = Api(args.api, args.auth, args.token)
    progress = Progress()
    _, info = api.call("GET", "/v2/info")
    if isinstance(info, dict):
        progress.say(f"API {args.api}: {info.get('name', '?')} {info.get('version', '')} "
                     f"(framework {info.get('frameworkId') or 'not yet registered'})")
    watches = submit(api, apps, progress.say)
    ok = False
    try:
        ok = watch_until(api, watches, args.wait, progress)
    except KeyboardInterrupt:
        progress.end()
        progress.say("interrupted")
        if not args.delete:
            progress.say("apps left running; remove them with --delete or DELETE /v2/apps/ID")
            return 130
    finally:
        if args.delete:
            delete(api, watches, progress.say)
    if args.wait > 0 and not ok:
        late = ", ".join(w.id for w in watches if not w.done)
        progress.say(f"not done after {args.wait:g} s: {late}")
        return 1
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except LaunchError as e:
        print(f"localcluster.cognitive.launch: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
