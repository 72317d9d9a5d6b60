"""Images: references, image indexes and the registry's HTTP API, resolving an
image to the variant a node runs (image_resolver, variant_selection), and the
`mesos-gpu image` command.

Must not: import the scheduler, the Marathon API or the executor."""
