/**
 * Runs docs/mcp-typescript.md's complete agent as a project outside the repository has it:
 * `node mcp-guide-driver.js AGENT_MODULE`, beside scripted.js, with ACTONCE_TARGET and
 * ACTONCE_MCP_URL (the sidecar's MCP front) set. It makes the support thread the agent tells
 * of its tickets (SUPPORT_THREAD); a scripted model opens two tickets in one turn; one run is
 * delivered twice. Prints what it saw as JSON: each delivery's answer, the model calls after
 * the first delivery and after both, the thread's notices and the titles of the tickets they
 * name, the Node version.
 */
import { randomUUID } from "node:crypto";
import { pathToFileURL } from "node:url";

import { Client } from "@actonce/client";
import { scriptedModel } from "./scripted.js";

const [agentModule] = process.argv.slice(2);
// The agent's rule: the thread is its own.
const rule = "billing";
const client = new Client(process.env["ACTONCE_TARGET"]);
const runId = `guide-${randomUUID()}`;
const setup = await client.begin({ runId: `setup-${runId}`, rule });
process.env["SUPPORT_THREAD"] = (await setup.createThread(`support of ${runId}`)).id;
await setup.end();
const agent = await import(pathToFileURL(agentModule).href);

const model = scriptedModel([
  [
    ["open_ticket", { title: "Disk full" }],
    ["open_ticket", { title: "Printer jammed" }],
  ],
  [],
]);
const answers = [await agent.handle(runId, "Open tickets for the disk and the printer", model)];
const first = model.calls;
answers.push(await agent.handle(runId, "Open tickets for the disk and the printer", model));

const reading = await client.begin({ runId: `read-${runId}`, rule });
const notices = (await reading.readThread(process.env["SUPPORT_THREAD"])).map((m) => m.text);
const tickets = [];
for (const text of notices) {
  const id = /^opened ticket (\S+):/.exec(text)?.[1];
  tickets.push(id === undefined ? null : (await reading.readArtifact(id)).data.title);
}
await reading.end();
console.log(JSON.stringify({ answers, first, calls: model.calls, notices, tickets, node: process.version }));
// The guide's clients keep their connections open, as a worker's do.
process.exit(0);
