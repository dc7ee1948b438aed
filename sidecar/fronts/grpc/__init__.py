"""The gRPC front: the RunActionsService servicer and its interceptors (log context,
decoding, the drain's gate, the metrics, and the call's span when the sidecar traces).
The server that holds them is built by the assembly (sidecar.assembly.server).
"""
