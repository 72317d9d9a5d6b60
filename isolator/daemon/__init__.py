"""The agent daemon: its flags, start-up (agent), the service that owns every
holding (service), the API server on the unix socket (server), the reconciler,
the metrics server, and what it runs beside: the driver watch, the Docker volume
plugin and nvidia-docker's REST API (side_services, nvidia_docker_api), the CDI
spec, and `agent flags` for the Mesos agent (mesos_agent_flags).

The top of isolator: it may import every other concern; none imports it."""
