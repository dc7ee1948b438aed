/**
 * Runs a guide's complete agent (docs/ai-sdk.md, docs/openai-agents-js.md,
 * docs/langgraph-js.md, docs/mastra.md) as a project outside the repository has it:
 * `node guide-driver.js FRAMEWORK AGENT_MODULE`, beside scripted.js (and scripted-chat.js for
 * LangGraph.js), with ACTONCE_TARGET set. Mastra's model is an AI SDK
 * model: the same scripted one as the AI SDK's. A card processor stands in the
 * card API's place (CARD_API) and a scripted model in the model's; one run is delivered
 * twice. Prints what it saw as JSON: each delivery's answer, the model calls after the first
 * delivery and after both, the charges made, the Node version.
 */
import { randomUUID } from "node:crypto";
import { pathToFileURL } from "node:url";

import { CardProcessor, scriptedAgentsModel, scriptedModel, type Turn } from "./scripted.js";

const [framework, agentModule] = process.argv.slice(2);
const processor = await new CardProcessor().start();
process.env["CARD_API"] = processor.url;
const agent = (await import(pathToFileURL(agentModule!).href)) as {
  handle(runId: string, request: string, model: unknown): Promise<string>;
};

const charge: Turn = [
  ["open_ticket", { title: "Charge ada" }],
  ["charge_card", { customer: "ada", cents: 500 }],
];
let model: unknown;
let calls: () => number;
if (framework === "ai-sdk" || framework === "mastra") {
  const scripted = scriptedModel([charge, []]);
  [model, calls] = [scripted, () => scripted.calls];
} else if (framework === "openai-agents") {
  // The triage agent hands off; the billing agent charges (and is approved).
  const counter = { calls: 0 };
  [model, calls] = [scriptedAgentsModel([[["transfer_to_billing", {}]], charge, []], counter), () => counter.calls];
} else if (framework === "langgraph") {
  const { ScriptedChatModel } = await import("./scripted-chat.js");
  const scripted = new ScriptedChatModel([charge, []]);
  [model, calls] = [scripted, () => scripted.calls];
} else {
  throw new Error(`no such framework: ${framework}`);
}

const runId = `guide-${randomUUID()}`;
const answers = [await agent.handle(runId, "Charge ada 500", model)];
const first = calls();
answers.push(await agent.handle(runId, "Charge ada 500", model));
const charges = processor.charges.map((c) => [c.customer, c.cents]);
console.log(JSON.stringify({ answers, first, calls: calls(), charges, node: process.version }));
await processor.stop();
// The guide's client keeps its channel open, as a worker's does.
process.exit(0);
