"""The Mesos framework: its v1 API drivers, scheduler, offer matching, TaskInfo builders,
executor, and the Marathon-style API. Talks to the agent-side module through its client."""
