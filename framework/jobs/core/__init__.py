"""What runs jobs: runs and their restart policy, gangs, schedules."""
