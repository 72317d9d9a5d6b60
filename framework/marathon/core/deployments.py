"""Deployments: one change to one or more apps, in flight until their tasks match it.

A deployment (a plan) remembers each affected app before (`original`, None for
a new app) and after (`target`, None for a removed app), and the groups it
created, changed or removed, so it can be rolled back. Its steps follow
Marathon's `DeploymentPlan`: first the apps that go are stopped, then new apps
are started (with no instances), then the apps are scaled or restarted layer
by layer in dependency order (an app waits for the apps it depends on).

Only one deployment may touch an app at a time; `?force=true` replaces it.
JSON out is Marathon's `/v2/deployments` item.
"""
import uuid
from typing import Callable, Dict, Iterable, List, Optional

START, SCALE, RESTART, STOP = ("StartApplication", "ScaleApplication",
                               "RestartApplication", "StopApplication")


def only_scaling(old: dict, new: dict) -> bool:
    """Whether the change touches nothing but `instances` (no restart needed)."""
    strip = lambda app: {k: v for k, v in app.items()
                         if k not in ("instances", "version", "versionInfo")}
    return strip(old) == strip(new)


def same_definition(old: dict, new: dict) -> bool:
    strip = lambda app: {k: v for k, v in app.items() if k not in ("version", "versionInfo")}
    return strip(old) == strip(new)


def new_plan(version: str, original: Dict[str, Optional[dict]], target: Dict[str, Optional[dict]],
             layers: Callable[[Iterable[str]], List[List[str]]],
             groups_before: Optional[Dict[str, Optional[dict]]] = None,
             groups_after: Optional[Dict[str, Optional[dict]]] = None,
             restart: Iterable[str] = ()) -> dict:
    """The plan from `original` to `target` (app id -> definition or None).
    `layers(ids)` orders app ids by dependency (see groups.dependency_layers);
    apps in `restart` restart even when their definition is unchanged."""
    restart = set(restart)
    stops = [i for i in target if target[i] is None and original.get(i) is not None]
    starts = [i for i in target if target[i] is not None and original.get(i) is None]
    actions: Dict[str, str] = {}
    for app_id, new in target.items():
        old = original.get(app_id)
        if new is None:
            continue
        if old is None or only_scaling(old, new) and app_id not in restart:
            actions[app_id] = SCALE
        else:
            actions[app_id] = RESTART
    steps = [[{"action": STOP, "app": i} for i in sorted(stops)],
             [{"action": START, "app": i} for i in sorted(starts)]]
    for layer in layers(actions):
        steps.append([{"action": actions[i], "app": i} for i in sorted(layer)])
    return {"id": str(uuid.uuid4()), "version": version,
            "original": dict(original), "target": dict(target),
            "groupsBefore": dict(groups_before or {}), "groupsAfter": dict(groups_after or {}),
            "steps": [step for step in steps if step]}


def affected_apps(plan: dict) -> List[str]:
    return sorted(set(plan["original"]) | set(plan["target"]))


def to_json(plan: dict, current_step: int = 0,
            readiness: Optional[Callable[[str], List[dict]]] = None) -> dict:
    """Marathon's deployment JSON; `current_step` counts from 0 (shown from 1);
    `readiness(app id)`: the readiness check results of its tasks."""
    steps = plan["steps"]
    current = steps[min(current_step, len(steps) - 1)] if steps else []
    results = readiness or (lambda app_id: [])
    return {
        "id": plan["id"],
        "version": plan["version"],
        "affectedApps": affected_apps(plan),
        "affectedPods": [],
        "steps": [{"actions": [dict(a) for a in step]} for step in steps],
        "currentActions": [dict(a, readinessCheckResults=results(a["app"])) for a in current],
        "currentStep": min(current_step, len(steps) - 1) + 1 if steps else 0,
        "totalSteps": len(steps),
    }


def result(plan: dict) -> dict:
    """The body of a change that started a deployment."""
    return {"version": plan["version"], "deploymentId": plan["id"]}
