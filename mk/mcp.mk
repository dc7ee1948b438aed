# The MCP front's TypeScript client test (tests/fronts/mcp/typescript): the TypeScript MCP
# SDK's own client, in a package of its own. Its test runs in the Python suite, which
# starts the sidecar; the package is installed before it.
#
#   make mcp-typescript-deps   install the test package's node_modules

MCP_TS := tests/fronts/mcp/typescript
MCP_TS_STAMP := $(MCP_TS)/node_modules/.installed

.PHONY: mcp-typescript-deps

$(MCP_TS_STAMP): $(MCP_TS)/package.json $(MCP_TS)/package-lock.json
	cd $(MCP_TS) && npm ci --silent --no-audit --no-fund
	touch $(MCP_TS_STAMP)

mcp-typescript-deps: $(MCP_TS_STAMP)

test-python: $(MCP_TS_STAMP)
