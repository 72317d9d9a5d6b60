"""The framework's state store: SQLite (state_store), ZooKeeper (zk_store,
zk_codec, zk_url), and moving SQLite state into ZooKeeper (state_migration).

Must not: import the scheduler or the Marathon API."""
