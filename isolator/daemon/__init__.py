"""The agent daemon process: its flags, start-up (agent: builds the GPU isolator
and wires its fault response, orphan sweep and watchers), the API server on the unix
socket (server), the metrics server, and what it runs beside: the driver watch,
the MIG layout watch, the Docker volume plugin and nvidia-docker's REST API
(side_services, nvidia_docker_api), the CDI spec, and `agent flags` for the Mesos
agent (mesos_agent_flags, mig_resources).

The top of isolator: it may import every other concern; none imports it."""
