"""Small helpers every layer uses (errors, locks, paths); imports nothing of the project."""
