/**
 * A queue worker that runs an AI SDK agent whose tools are MCP tools of actonce's MCP front
 * and gateway (the sidecar's own `create` and `notice`, a payments server's `charge` and
 * `charge_keyed`), each called with `callTool` in its tool call's scope over one connection
 * (`scopedFetch`). One delivery per process, killed with SIGKILL after its k-th write or as
 * its m-th model call starts. `node mcp-worker.js JOB_JSON`.
 */
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Client as McpClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { generateText, stepCountIs, tool } from "ai";
import { z } from "zod";

import { actonceCause, Client } from "../../src/index.js";
import { Actonce, Parked } from "../../src/ai-sdk.js";
import { callTool, scopedFetch } from "../../src/mcp.js";
import type { Job, Result } from "./ai-sdk-worker.js";
import { scriptedModel, type Turn, WORDINGS } from "./scripted.js";

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
  let writes = 0;
  const landed = () => {
    writes++;
    if (writes === job.killAt) process.kill(process.pid, "SIGKILL");
  };
  const client = new Client(job.target);
  const actonce = new Actonce(client, { rule: "billing-agent" }); // grid.ts RULE
  const mcp = new McpClient({ name: "billing-worker", version: "1.0.0" });
  await mcp.connect(new StreamableHTTPClientTransport(new URL(job.processor), { fetch: scopedFetch() }));
  const customer = (name: string) => `${job.runId}-${name}`;
  const charging = (name: string) =>
    tool({
      description: `Charge a customer through the payments server (${name}).`,
      inputSchema: z.object({ customer: z.string(), cents: z.number() }),
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
      description: "Open a ticket and tell the thread.",
      inputSchema: z.object({ title: z.string() }),
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
  let state: string;
  let parked: string[] = [];
  try {
    const result = await actonce.deliver(job.runId, async (delivery) => {
      const answer = await generateText({
        model: actonce.model(inner),
        tools,
        prompt: "Bill.",
        stopWhen: stepCountIs(6),
        abortSignal: delivery.signal,
      });
      return answer.text;
    });
    if (result instanceof Parked) {
      state = result.items[0]!.reason;
      parked = result.items.map((item) => item.id);
    } else {
      state = result === "done" ? "done" : `answered ${JSON.stringify(result)}`;
    }
  } catch (error) {
    if (process.env["GRID_DEBUG"]) console.error(error);
    state = actonceCause(error)?.reason ?? `${(error as Error).name}: ${(error as Error).message}`;
  } finally {
    await mcp.close();
    client.close();
  }
  return { state, writes, modelCalls: inner.calls, parked };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const job = JSON.parse(process.argv[2]!) as Job;
  writeFileSync(job.result, JSON.stringify(await run(job)));
}
