"""Subcommands of the driver volume: `volume build|ls|gc|plugin` (issue: Driver volume)."""


def register(sub) -> None:
    """The `volume` subcommands are added with the volume builder."""
