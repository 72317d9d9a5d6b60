"""Jobs: Metronome's v1 API, runs to completion, gangs, schedules.

`state/` the typed model (jobs, schedules, runs and their history, as stored),
`core/` what runs them over the GPU scheduler (runs, restart policy, gangs'
all-or-nothing end, schedules), `api/` one module per resource path of /v1. It
uses the scheduler as Marathon's layer does (TaskSpecs in, task records out) and
owns no Mesos connection of its own.
"""
