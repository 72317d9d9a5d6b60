"""Deployments: one change to one app, in flight until the app's tasks match it.

A deployment remembers the app before (`original`, None for a new app) and
after (`target`, None for a deleted app) so it can be rolled back. Only one
deployment may touch an app at a time; `?force=true` replaces it. JSON out is
Marathon's `/v2/deployments` item.
"""
import time
import uuid
from typing import Optional

START, SCALE, RESTART, STOP = ("StartApplication", "ScaleApplication",
                               "RestartApplication", "StopApplication")


def timestamp(seconds: Optional[float] = None) -> str:
    """Marathon's time format: ISO 8601 UTC with milliseconds, `...T15:13:48.343Z`."""
    seconds = time.time() if seconds is None else seconds
    whole = int(seconds)
    millis = int(round((seconds - whole) * 1000))
    if millis == 1000:
        whole, millis = whole + 1, 0
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


def new_plan(app_id: str, action: str, version: str, original: Optional[dict],
             target: Optional[dict]) -> dict:
    return {"id": str(uuid.uuid4()), "version": version, "appId": app_id, "action": action,
            "original": original, "target": target}


def to_json(plan: dict) -> dict:
    action = {"action": plan["action"], "app": plan["appId"]}
    return {
        "id": plan["id"],
        "version": plan["version"],
        "affectedApps": [plan["appId"]],
        "affectedPods": [],
        "steps": [{"actions": [action]}],
        "currentActions": [dict(action, readinessCheckResults=[])],
        "currentStep": 1,
        "totalSteps": 1,
    }


def result(plan: dict) -> dict:
    """The body of a change that started a deployment."""
    return {"version": plan["version"], "deploymentId": plan["id"]}
