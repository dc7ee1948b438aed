"""The MCP front and the exactly-once gateway (``actonce serve --mcp-listen``).

The front serves RunActions' writes and reads as MCP tools over stateless
Streamable HTTP (``app``), built from the API's one table like the gRPC front:
the tools' schemas (``schemas``), their arguments (``decoding``) and their
answers (``tools``). The gateway lists other MCP servers' tools through it and
brackets every call of one as a step (``gateway``). Both only translate: every
call goes through ``RunActions``, the same path as the gRPC one; MCP types stop
here. ``settings`` reads the operator's files without the SDK.
"""
