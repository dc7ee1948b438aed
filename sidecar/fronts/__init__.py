"""The sidecar's fronts: each translates its protocol to ``RunActions`` and back."""
