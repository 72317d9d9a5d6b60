"""Marathon's v2 API family, in Marathon's own shape: `api` (one module per
resource path and its JSON views) over `core` (the group manager, the API's
changes, deployments, the instance keeper, task health, readiness) over `state`
(the model read from and written to Marathon's JSON). Served by the HTTP kit
(framework/http), mounted by framework/process/api_families.py.

Must not: import the dashboard (framework/ui) or the process (framework/process)."""
