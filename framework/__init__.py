"""The pymesos framework: scheduler, offer matching, TaskInfo builders, executor,
and the Marathon-style API. Talks to the agent-side module through its client."""
