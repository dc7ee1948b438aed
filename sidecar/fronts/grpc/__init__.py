"""The gRPC front: the RunActionsService servicer, its interceptors, and the
server factory that assembles the sidecar.
"""
