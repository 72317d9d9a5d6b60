"""Which framework instance leads: the Leadership every part asks (leadership)
and the election on ZooKeeper with its fencing (election).

Must not: import the scheduler or the Marathon API."""
