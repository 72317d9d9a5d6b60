"""A Marathon v2-compatible REST API in front of the GPU framework.

`ids` (path ids), `app_model` (fields, defaults, updates, JSON out),
`validation` (Marathon's error bodies), `security` (auth, body limits, host
access), `deployments`, `registry` (apps, deployments, tasks in memory and in
the store), `app_service` (the API's changes), `reconciler` (apps -> tasks),
`task_json`, `events` (SSE), `http_api` (routes), `server` (HTTP),
`service` (the `mesos-gpu framework` process).
"""
