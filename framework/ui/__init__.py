"""The dashboard: a web UI at `/ui/` of the framework's API listener (nodes and
their GPUs, apps, tasks, live), its files shipped as package data, and the
read-only `/v1/nodes` endpoint it reads besides the Marathon API."""
