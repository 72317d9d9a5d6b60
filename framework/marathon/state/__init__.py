"""Marathon's model: app definitions (app_model), groups and the tree (groups),
path ids (path_ids), health and readiness checks; each read once from Marathon's
JSON (422s in Marathon's shapes) and written back to the same JSON.

Must not: import core or api."""
