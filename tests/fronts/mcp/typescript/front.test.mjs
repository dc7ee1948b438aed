// The MCP front driven by the TypeScript MCP SDK's own client. test_typescript.py starts
// a live `actonce serve --mcp-listen` and passes its base URL in ACTONCE_MCP_BASE.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const base = process.env.ACTONCE_MCP_BASE;
assert.ok(base, "ACTONCE_MCP_BASE names the sidecar's MCP front");

async function beginAttempt(runId) {
  const answer = await fetch(`${base}/attempts`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ run_id: runId, rule: "triage", checkpoint: "cp-0" }),
  });
  assert.equal(answer.status, 200);
  return (await answer.json()).attempt_id;
}

async function connect(attemptId) {
  const client = new Client({ name: "typescript-test", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
    requestInit: { headers: attemptId ? { "actonce-attempt-id": attemptId } : {} },
  });
  await client.connect(transport);
  return client;
}

test("lists the tools with their schemas and annotations", async () => {
  const client = await connect(null);
  try {
    const { tools } = await client.listTools();
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
    assert.deepEqual(Object.keys(byName).sort(), ["create", "create_thread", "edit", "notice", "read", "send"]);
    assert.equal(byName.read.annotations.readOnlyHint, true);
    assert.equal(byName.create.annotations.idempotentHint, true);
    assert.ok(byName.notice.outputSchema.properties.outcome);
  } finally {
    await client.close();
  }
});

test("a retried attempt's writes are already applied, in another order", async () => {
  const first = await connect(await beginAttempt("run-ts"));
  let threadId;
  try {
    const thread = await first.callTool({ name: "create_thread", arguments: { title: "ts" } });
    assert.equal(thread.structuredContent.outcome, "OUTCOME_APPLIED");
    threadId = thread.structuredContent.id;
    const created = await first.callTool({ name: "create", arguments: { kind: "ts", data: { a: [1, 2] } } });
    assert.equal(created.structuredContent.outcome, "OUTCOME_APPLIED");
  } finally {
    await first.close();
  }
  const second = await connect(await beginAttempt("run-ts"));
  try {
    const created = await second.callTool({ name: "create", arguments: { kind: "ts", data: { a: [1, 2.0] } } });
    assert.equal(created.structuredContent.outcome, "OUTCOME_ALREADY_APPLIED");
    const thread = await second.callTool({ name: "create_thread", arguments: { title: "ts" } });
    assert.equal(thread.structuredContent.outcome, "OUTCOME_ALREADY_APPLIED");
    assert.equal(thread.structuredContent.id, threadId);
  } finally {
    await second.close();
  }
});

test("an error is a tool result with its reason and class", async () => {
  const client = await connect("att_unknown");
  try {
    const answer = await client.callTool({ name: "notice", arguments: { thread_id: "t", text: "x" } });
    assert.equal(answer.isError, true);
    assert.equal(answer.structuredContent.reason, "UNKNOWN_ATTEMPT");
    assert.equal(answer.structuredContent.failure_class, "RETRYABLE");
  } finally {
    await client.close();
  }
});
