"""Server: the sidecar as an operator runs it. Real `actonce serve` and `actonce store`
processes (or the assembled server): configuration, graceful drain, metrics, sockets, TLS
and tokens to the store, and callers that give up under short deadlines."""
