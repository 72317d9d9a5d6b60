"""The `mesos-gpu` command: composes the subcommands each layer contributes."""
