"""`/v2/tasks`, `/v2/deployments` and `/v2/queue`: what runs, what changes, what waits."""
from framework.marathon.state import app_model
from framework.marathon.core import deployments
from framework.marathon.state import path_ids as ids
from framework.marathon.api.apps import deployment, scale_and_wipe
from framework.marathon.api.context import ApiContext
from framework.http.json_reader import parse_body
from framework.http.routing import Request, Response, Router
from framework.http.validation import ApiError
from framework.tasks.timestamps import format_timestamp


def register(router: Router, api: ApiContext) -> None:
    t = TasksResource(api)
    router.add(r"/v2/tasks", GET=t.list)
    router.add(r"/v2/tasks/delete", POST=t.delete)
    router.add(r"/v2/deployments", GET=t.deployments)
    router.add(r"/v2/deployments/(?P<plan_id>[^/]+)", DELETE=t.cancel)
    router.add(r"/v2/queue", GET=t.queue)
    router.add(r"/v2/queue(?P<app_id>/.+)/delay", DELETE=t.reset_delay)


class TasksResource:
    def __init__(self, api: ApiContext) -> None:
        self.api = api
        self.group_manager = api.group_manager

    def list(self, r: Request) -> Response:
        states = {s.strip().upper().removeprefix("TASK_") for key in ("status", "status[]")
                  for v in r.query.get(key, ()) for s in v.split(",") if s.strip()}
        with self.group_manager.lock:
            tasks = self.group_manager.live_tasks()
            if states:
                tasks = [t for t in tasks if t.state.removeprefix("TASK_") in states]
            return Response(200, {"tasks": [self.api.view.task_json(t, r.flag("gpus"))
                                            for t in tasks]})

    def delete(self, r: Request) -> Response:
        """POST /v2/tasks/delete {"ids": [...]}: kill these tasks (and scale down)."""
        scale_and_wipe(r)
        body = parse_body(r.body)
        if not isinstance(body, dict) or not isinstance(body.get("ids"), list) \
                or not all(isinstance(i, str) for i in body["ids"]):
            raise ApiError(422, {"message": "Invalid JSON",
                                 "details": [{"path": "/ids", "errors": ["error.expected.jsarray"]}]})
        plan = self.api.apps.kill_many(body["ids"], r.flag("scale"), r.flag("force"))
        if plan is not None:
            return deployment(plan)
        return Response(200, {})

    def deployments(self, r: Request) -> Response:
        with self.group_manager.lock:
            readiness = self.group_manager.readiness
            return Response(200, [deployments.to_json(p, self.group_manager.progress.get(p["id"], 0),
                                                      readiness and readiness.results_for)
                                  for p in self.group_manager.plans.values()])

    def cancel(self, r: Request, plan_id: str) -> Response:
        rollback = self.api.apps.cancel(plan_id, r.flag("force"))
        if rollback is None:
            return Response(202)
        return deployment(rollback)

    def queue(self, r: Request) -> Response:
        items = []
        with self.group_manager.lock:
            queued = self.group_manager.queued()
            now = self.group_manager.clock()
            for app, count, backoff in queued:
                left = max(0.0, backoff.until - now)
                summary = {"processedOffersCount": 0, "unusedOffersCount": 0}
                seen = self.api.offer_summary(app["id"]) if self.api.offer_summary else None
                if seen:            # Marathon's counts and reasons, as the scheduler saw them
                    summary.update({k: v for k, v in seen.items()
                                    if not k.startswith("last")})
                    summary.update({k: format_timestamp(v) for k, v in seen.items()
                                    if k.startswith("last") and v is not None})
                reason = self.group_manager.waiting_reason(app["id"])
                if reason:      # inside the summary: strict clients build objects from the item
                    summary["waitingReason"] = reason
                items.append({"app": app_model.to_json(app), "count": count,
                              "delay": {"timeLeftSeconds": int(round(left)), "overdue": left <= 0},
                              "since": backoff.since, "processedOffersSummary": summary})
        return Response(200, {"queue": items})

    def reset_delay(self, r: Request, app_id: str) -> Response:
        self.api.apps.reset_delay(ids.canonical(app_id))
        return Response(204)
