/**
 * A queue worker that runs an AI SDK agent whose tools are MCP tools of actonce's MCP front
 * and gateway (the sidecar's own `create` and `notice`, a payments server's `charge` and
 * `charge_keyed`), each called with `callTool` in its tool call's scope over one connection
 * (`scopedFetch`). One delivery per process, killed with SIGKILL after its k-th write or as
 * its m-th model call starts. `node mcp-worker.js JOB_JSON`.
 */
import { Client as McpClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { generateText, stepCountIs, tool } from "ai";

import { Client } from "../../src/index.js";
import { Actonce } from "../../src/ai-sdk.js";
import { callTool, scopedFetch } from "../../src/mcp.js";
import { scriptedModel, type Turn, WORDINGS } from "./scripted.js";
import { CHARGE, delivered, DESCRIBED, type Job, main, type Result, RULE, TICKET, Writes } from "./worker.js";

export const MCP_SCRIPT: Turn[] = [
  [
    ["open_ticket", { title: WORDINGS["Disk full"]! }],
    ["charge_keyed", { customer: "ada", cents: 500 }],
  ],
  [
    ["charge_keyed", { customer: "ada", cents: 500 }],
    ["charge", { customer: "bob", cents: 700 }],
  ],
  [],
];

export async function run(job: Job): Promise<Result> {
  const writes = new Writes(job);
  const { landed } = writes;
  const client = new Client(job.target);
  const actonce = new Actonce(client, { rule: RULE });
  const mcp = new McpClient({ name: "billing-worker", version: "1.0.0" });
  await mcp.connect(new StreamableHTTPClientTransport(new URL(job.processor), { fetch: scopedFetch() }));
  const customer = (name: string) => `${job.runId}-${name}`;
  const charging = (name: string) =>
    tool({
      description: `Charge a customer through the payments server (${name}).`,
      inputSchema: CHARGE,
      execute: async ({ customer: who, cents }, { toolCallId }) => {
        const result = await callTool(mcp, toolCallId, {
          name: `payments__${name}`,
          arguments: { customer: customer(who), cents },
        });
        landed();
        return result;
      },
    });
  const tools = {
    open_ticket: tool({
      description: DESCRIBED.open_ticket,
      inputSchema: TICKET,
      execute: async ({ title }, { toolCallId }) => {
        const made = await callTool(mcp, toolCallId, {
          name: "create",
          arguments: { kind: "ticket", data: { title, run: job.runId } },
        });
        landed();
        await callTool(mcp, toolCallId, {
          name: "notice",
          arguments: { thread_id: job.threadId, text: `opened a ticket: ${title}` },
        });
        landed();
        return made;
      },
    }),
    charge: charging("charge"),
    charge_keyed: charging("charge_keyed"),
  };
  const inner = scriptedModel(MCP_SCRIPT, job.killAtModel ?? 0);
  const { state, parked } = await delivered(
    () =>
      actonce.deliver(job.runId, async (delivery) => {
        const answer = await generateText({
          model: actonce.model(inner),
          tools,
          prompt: "Bill.",
          stopWhen: stepCountIs(6),
          abortSignal: delivery.signal,
        });
        return answer.text;
      }),
    async () => {
      await mcp.close();
      client.close();
    },
  );
  return { state, writes: writes.count, modelCalls: inner.calls, parked };
}

await main(import.meta.url, run);
