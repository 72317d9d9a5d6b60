"""A Marathon v2-compatible REST API in front of the GPU framework.

Reading bodies: `ids` (path ids), `json_reader`, `validation` (Marathon's error
bodies), `app_model` (app fields, defaults, rules, JSON out), `groups` (group
bodies, the tree, dependencies), `security` (auth, body limits, host access).

State and changes: `group_manager` (apps, groups, deployments, tasks in memory and
in the store), `versions`, `deployments` (plans in steps), `app_service` and
`group_service` (the API's changes), `instance_keeper` (apps -> tasks, deployments
moved along), `events` (SSE), `metrics`.

HTTP: `routing` (requests, responses, the route table), one `api_*` module per
resource (`api_apps`, `api_groups`, `api_tasks`, `api_system`,
`api_unsupported`), `app_view` and `task_json` (JSON out, fast listings),
`http_api` (the modules together), `server` (HTTP), `service` (the
`mesos-gpu framework` process).
"""
