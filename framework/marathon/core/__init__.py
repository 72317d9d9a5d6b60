"""What Marathon does with its model: the group manager (apps, groups, deployments,
tasks in memory over the store), the API's changes to apps and groups, deployment
plans and versions, the instance keeper (instances wanted vs task records: the
hand-off to the scheduler), task health checks and readiness.

Must not: import api, or talk HTTP."""
