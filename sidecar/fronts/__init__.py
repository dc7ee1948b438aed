"""The sidecar's fronts: each translates its protocol to ``RunActions`` and back, both
built from the API's one table (``operations``)."""
