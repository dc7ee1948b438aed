"""The gRPC front: the RunActionsService servicer, built from the API's one table
(sidecar.fronts.operations), the status table that tells each error as a gRPC status
(``status``), and the interceptors (log context, decoding, the drain's gate, the metrics,
and the call's span when the sidecar traces). The server that holds them is built by the
assembly (sidecar.assembly.server).
"""
