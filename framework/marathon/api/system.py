"""`/ping`, `/v2/info` (and our `/v2/info/gpu_sharing`), `/v2/leader`, `/metrics` and
`/logging`: the instance itself."""
import logging
import threading
from typing import Any, Dict, Optional

from framework.marathon.api.context import ApiContext
from framework.http.json_reader import Reader, parse_body
from framework.http.routing import Request, Response, Router
from framework.http.validation import ApiError, Violations, message

log = logging.getLogger(__name__)

TRACE = 5                         # Marathon's (logback's) level below debug
logging.addLevelName(TRACE, "TRACE")
LEVELS = {"trace": TRACE, "debug": logging.DEBUG, "info": logging.INFO,
          "warn": logging.WARNING, "error": logging.ERROR}
ROOT_NAMES = ("ROOT", "root")
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


def register(router: Router, api: ApiContext) -> None:
    s = SystemResource(api)
    router.add(r"/ping", GET=s.ping)
    router.add(r"/v2/info", GET=s.info)
    router.add(r"/v2/info/gpu_sharing", GET=s.gpu_sharing)
    router.add(r"/v2/leader", GET=s.leader, DELETE=s.abdicate)
    router.add(r"/metrics", GET=s.metrics)
    router.add(r"/metrics/prometheus", GET=s.prometheus)
    router.add(r"/logging", GET=s.loggers, POST=s.set_level)


class SystemResource:
    def __init__(self, api: ApiContext) -> None:
        self.api = api
        self._resets: Dict[str, threading.Timer] = {}
        self._lock = threading.Lock()

    def ping(self, r: Request) -> Response:
        if "application/json" in r.accept:
            return Response(200, "pong", {"Content-Type": "application/json"})
        return Response(200, "pong\n")

    def info(self, r: Request) -> Response:
        return Response(200, self.api.info())

    def gpu_sharing(self, r: Request) -> Response:
        """Fractional GPUs: what each sharing isolates, said plainly, and the agents
        sharing GPUs and how (ours; /v2/info keeps Marathon's shape)."""
        if self.api.gpu_sharing is None:
            return Response(404, message("no GPU sharing view on this instance"))
        return Response(200, self.api.gpu_sharing())

    # -- leader ---------------------------------------------------------------------------
    def leader(self, r: Request) -> Response:
        leader = self.api.leadership.leader()
        if leader is None:
            raise message(404, "There is no leader")
        return Response(200, {"leader": leader})

    def abdicate(self, r: Request) -> Response:
        refused = [name for name in ("backup", "restore") if r.text(name) is not None]
        if refused:
            raise ApiError(422, {"message": f"{' and '.join(refused)} on abdication is not "
                                            f"supported by this framework: its state is the "
                                            f"SQLite file in --state_dir (or, with --zk, the "
                                            f"nodes below the ZooKeeper path); copy it with "
                                            f"the framework stopped"})
        if not self.api.leadership.is_leader():
            raise message(404, "There is no leader")
        # Answer first, as Marathon does: giving up leadership stops the
        # connection to Mesos, which takes a moment.
        threading.Thread(target=self.api.leadership.abdicate, name="abdication",
                         daemon=True).start()
        return Response(200, {"message": "Leadership abdicated"})

    # -- metrics --------------------------------------------------------------------------
    def metrics(self, r: Request) -> Response:
        if "text/plain" in r.accept and "application/json" not in r.accept:
            return self.prometheus(r)
        return Response(200, self.api.metrics.json())

    def prometheus(self, r: Request) -> Response:
        return Response(200, self.api.metrics.prometheus().encode(),
                        {"Content-Type": PROMETHEUS_TEXT})

    # -- logging --------------------------------------------------------------------------
    def loggers(self, r: Request) -> Response:
        out = {"ROOT": logging.getLevelName(logging.root.level)}
        for name in sorted(logging.root.manager.loggerDict):
            logger = logging.root.manager.loggerDict[name]
            if not isinstance(logger, logging.Logger):
                continue
            out[name] = (logging.getLevelName(logger.level) if logger.level
                         else f"{logging.getLevelName(logger.getEffectiveLevel())} (inherited)")
        return Response(200, out)

    def set_level(self, r: Request) -> Response:
        body = parse_body(r.body)
        v = Violations()
        reader = Reader(v)
        table = reader.obj(body, "/")
        level: Optional[str] = None
        name: Optional[str] = None
        duration: Optional[int] = None
        if table is not None:
            if table.get("level") is None:
                v.type_error("/level", "error.path.missing")
            else:
                level = reader.string(table["level"], "/level")
                if level is not None and level.lower() not in LEVELS:
                    v.type_error("/level", "error.unknown.enum.literal")
            if table.get("logger") is None:
                v.type_error("/logger", "error.path.missing")
            else:
                name = reader.string(table["logger"], "/logger")
                if name is not None and not name.strip():
                    v.rule("/logger", "must not be empty")
            duration = reader.optional(table, "durationSeconds", "/",
                                       lambda x, p: reader.integer(x, p, 1))
        v.raise_if_any()
        assert level is not None and name is not None
        logger = logging.root if name in ROOT_NAMES else logging.getLogger(name)
        before = logger.level
        logger.setLevel(LEVELS[level.lower()])
        log.info("logger %s set to %s%s", name, level.upper(),
                 f" for {duration} s" if duration else "")
        with self._lock:
            pending = self._resets.pop(name, None)
            if pending is not None:
                pending.cancel()
                before = pending.args[1]
            if duration:
                timer = threading.Timer(duration, self._reset, (name, before))
                timer.daemon = True
                self._resets[name] = timer
                timer.start()
        change: Dict[str, Any] = {"level": level, "logger": name}
        if duration:
            change["durationSeconds"] = duration
        return Response(200, change)

    def _reset(self, name: str, level: int) -> None:
        with self._lock:
            self._resets.pop(name, None)
        logger = logging.root if name in ROOT_NAMES else logging.getLogger(name)
        logger.setLevel(level)
        log.info("logger %s back to %s (duration over)", name, logging.getLevelName(level))
