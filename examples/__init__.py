"""Examples a user can copy; each folder is self-contained."""
