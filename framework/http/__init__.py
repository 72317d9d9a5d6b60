"""The HTTP kit every API family shares: requests, responses and the route table
(routing), authentication and the Docker policy (security), JSON reading with
Marathon's error shapes (json_reader, validation), the server with its SSE stream
(server, events), request metrics, forwarding to the leader (leader_proxy), the
paths served without credentials (public_paths).

Must not: import an API family, the dashboard or the process."""
