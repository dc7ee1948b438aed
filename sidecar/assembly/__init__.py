"""The assembly: the top of the sidecar, where the parts are chosen and wired.

It builds the ledger, the store client, the core and the fronts from the configuration, puts
the metrics and the traces around each seam (the ledger's append hooks, the store client's
middleware, the gRPC front's interceptors), and closes them again in order. Nothing below
imports it.
"""
