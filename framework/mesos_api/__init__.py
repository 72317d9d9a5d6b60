"""Our Mesos v1 HTTP API drivers: the scheduler's (to the master) and the executor's (to
its agent), standard library plus kazoo for zk:// masters.

Owns the wire: RecordIO over a chunked HTTP response (recordio.py, event_stream.py),
SUBSCRIBE and its Mesos-Stream-Id, the calls, heartbeats, redirects to the leading
master, master detection on ZooKeeper, and re-subscription. Messages are plain dicts
shaped like the v1 JSON API. Must not know about tasks, GPUs or the state store: the
callbacks (callbacks.py) are where the rest of the framework begins.
"""
