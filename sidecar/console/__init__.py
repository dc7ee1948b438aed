"""The operator's web console: runs, one run's timeline, what needs a person."""
