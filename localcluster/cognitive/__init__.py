"""The cognitive-workload example: see README.md."""
