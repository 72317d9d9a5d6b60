"""A Marathon v2-compatible REST API in front of the GPU framework.

`ids` (path ids), `app_model` (fields, defaults, updates, JSON out),
`validation` (Marathon's error bodies), `security` (auth, body limits, host
access), `deployments`, `app_manager` (apps -> tasks), `events` (SSE),
`http_api` (routes), `server` (the `mesos-gpu framework` process).
"""
