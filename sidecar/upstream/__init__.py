"""The sidecar's client of the artifact store (the ArtifactStoreService contract).

Only this package talks to the store; it turns transport errors into the
sidecar's own errors in one place. ``base`` is the seam the core calls, one method
(``StoreClient.call``) and the calls of the contract as data; ``grpc`` reaches any store
over gRPC and decodes its messages into the contract's records; ``inprocess`` calls the
embedded store's backend and passes its records through.
"""
