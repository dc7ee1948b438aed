"""The sidecar's rules, in plain modules that know nothing of gRPC.

canonical (JSON input, RFC 8785 digests), ids (derivation), edits (pointer
rules, skip-when-equal), refusals (store code to failure class), effects
(ToolEffect per RPC and per tool name). The live attempts, which hold state,
are the core's (sidecar.core.attempts).
"""
