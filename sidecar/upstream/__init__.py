"""The sidecar's client of the artifact store (the ArtifactStoreService contract).

Only this package talks to the store; it turns transport errors into the
sidecar's own errors in one place.
"""
