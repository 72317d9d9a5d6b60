"""Deployments: one change to one app, in flight until the app's tasks match it.

A deployment remembers the app before (`original`, None for a new app) and
after (`target`, None for a deleted app) so it can be rolled back. Only one
deployment may touch an app at a time; `?force=true` replaces it. JSON out is
Marathon's `/v2/deployments` item.
"""
import uuid
from typing import Optional

START, SCALE, RESTART, STOP = ("StartApplication", "ScaleApplication",
                               "RestartApplication", "StopApplication")


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
