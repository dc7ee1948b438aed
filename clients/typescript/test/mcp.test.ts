/**
 * MCP tool calls through `actonce serve`'s MCP front with the MCP TypeScript SDK's own
 * client: each tool call in its own scope of the delivery over one connection, the front's
 * errors thrown as ActonceError, its refusals handed back.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { Client as McpClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

import { ActonceError, Client, deliver, type Delivery, Parked } from "../src/index.js";
import { callTool, frontError, scopedFetch } from "../src/mcp.js";
import { freePort, type Sidecar, startSidecar } from "./sidecar.js";

let sidecar: Sidecar;
let client: Client;
let mcp: McpClient;

before(async () => {
  const port = await freePort();
  sidecar = await startSidecar("--mcp-listen", `127.0.0.1:${port}`);
  client = new Client(sidecar.target);
  mcp = new McpClient({ name: "actonce-ts-tests", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`), {
    fetch: scopedFetch(),
  });
  await mcp.connect(transport);
});

after(async () => {
  await mcp.close();
  client.close();
  await sidecar.stop();
});

const RULE = "mcp-tests";
const structured = (result: unknown) => (result as { structuredContent: Record<string, unknown> }).structuredContent;

describe("MCP tool calls, each in its scope", () => {
  test("sibling tool calls over one connection are scopes of their own, and a redelivery finds their writes", async () => {
    const runId = `run-${randomUUID()}`;
    const threads = (delivery: Delivery) =>
      Promise.all(
        ["call_a", "call_b"].map(async (id) => {
          const result = await callTool(mcp, id, { name: "create_thread", arguments: { title: "Same title" } });
          assert.equal(delivery.attempt.run.runId, runId);
          return structured(result);
        }),
      );
    const first = await deliver(client, { runId, rule: RULE }, threads);
    assert.ok(!(first instanceof Parked));
    assert.notEqual(first[0]!["id"], first[1]!["id"], "the scopes wrote one thread");
    const again = await deliver(client, { runId, rule: RULE }, threads);
    assert.ok(!(again instanceof Parked));
    assert.deepEqual(
      again.map((r) => r["id"]),
      first.map((r) => r["id"]),
    );
    assert.deepEqual(
      again.map((r) => r["outcome"]),
      ["OUTCOME_ALREADY_APPLIED", "OUTCOME_ALREADY_APPLIED"],
    );
  });

  test("a refusal is the model's: handed back as the tool's result", async () => {
    const result = await deliver(client, { runId: `run-${randomUUID()}`, rule: RULE }, () =>
      callTool(mcp, "call_1", { name: "create", arguments: { kind: "", data_json: "{}" } }),
    );
    const error = frontError(result);
    assert.ok(error?.refused, JSON.stringify(result));
    assert.equal(error.reason, "INVALID_ARGUMENT");
  });

  test("any other error of the front is thrown as an ActonceError: a stale delivery writes nothing", async () => {
    const runId = `run-${randomUUID()}`;
    let resume!: () => void;
    const paused = new Promise<void>((done) => (resume = done));
    let begun!: () => void;
    const started = new Promise<void>((done) => (begun = done));
    const stale = deliver(client, { runId, rule: RULE }, async () => {
      begun();
      await paused;
      return callTool(mcp, "call_1", { name: "create_thread", arguments: { title: "late" } });
    });
    await started;
    await deliver(client, { runId, rule: RULE }, async () => "the newer delivery");
    resume();
    await assert.rejects(stale, (e: unknown) => e instanceof ActonceError && e.reason === "ATTEMPT_FENCED" && e.retryable);
  });

  test("an upstream tool's own error, which the gateway passes on, is not the front's", () => {
    const upstream = {
      isError: true,
      _meta: { "actonce/outcome": "OUTCOME_APPLIED" },
      structuredContent: { reason: "DECLINED", failure_class: "PERMANENT" },
    };
    assert.equal(frontError(upstream), undefined);
    assert.equal(frontError({ ...upstream, _meta: {} })?.reason, "DECLINED");
    assert.equal(frontError({ isError: false, structuredContent: { reason: "x", failure_class: "UNKNOWN" } }), undefined);
  });

  test("an MCP tool call outside a delivery is refused", async () => {
    await assert.rejects(callTool(mcp, "call_1", { name: "create_thread", arguments: { title: "x" } }), /under deliver\(\)/);
  });
});
