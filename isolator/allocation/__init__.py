"""Who holds which GPU, durably: the allocator, the journalled ledger and its
holdings, each holding's owner (the process the kernel names), recovery of the
ledger against the kernel and Docker at start, what Docker and the Mesos agent
say about containers (docker_state, mesos_agent_api), the processes of a
container (process_containers).

Must not: serve the API or run threads of the daemon; it is called by it."""
