"""`mesos-gpu framework` as a process: it opens the store, starts the scheduler,
mounts the API families (api_families: the one place they are registered), serves
them (framework/http) and, with --zk, runs as one instance of several
(high_availability, leader_api, event_relay); `mesos-gpu migrate-state`
(state_transfer)."""
