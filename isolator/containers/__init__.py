"""The GPU isolator of a node: each container's life (prepare, isolate, update,
cleanup, release, adopt), and the orphan sweep that releases what nobody owns.

Must not: serve the API or parse flags (the daemon does, and calls these)."""
