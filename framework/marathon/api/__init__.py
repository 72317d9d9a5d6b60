"""Marathon's /v2 routes: one module per resource path (apps, groups, tasks, system,
nodes, the refused ones) with its JSON views (app_view, task_json), their context,
and http_api, the route table of them all."""
