"""The sidecar's rules, in plain modules that know nothing of gRPC.

canonical (JSON input, RFC 8785 digests), ids (derivation), edits (pointer
rules, skip-when-equal), effects (ToolEffect per RPC and per tool name). What a store
refusal means (its code's failure class, a used id counting as done) is the store
contract's (sidecar.store_contract). The live attempts, which hold state, are the core's
(sidecar.core.attempts).
"""
