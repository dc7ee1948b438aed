/**
 * A scripted agent for the cross-language test (clients/crosslang): it makes a
 * plan's writes as one attempt of a run, one JSON line per write on stdout, and
 * stops dead after a number of them, as an agent whose lease expired would.
 *
 *   node build/test/plan-agent.js TARGET PLAN.json STOP_AFTER
 */
import { readFileSync } from "node:fs";

import { type Attempt, Client, type Effect, type Outcome, rawJson } from "../src/index.js";

interface PlannedWrite {
  op: string;
  as?: string;
  title?: string;
  kind?: string;
  data?: unknown;
  artifact?: string;
  path?: string;
  value?: unknown;
  thread?: string;
  text?: string;
  tool?: string;
  effect?: Effect;
  args?: unknown;
  result?: unknown;
}

interface Plan {
  run_id: string;
  rule: string;
  checkpoint: string;
  writes: PlannedWrite[];
}

const [target, planPath, stopAfterText] = process.argv.slice(2);
if (!target || !planPath || !stopAfterText) throw new Error("usage: plan-agent TARGET PLAN.json STOP_AFTER");
const plan = JSON.parse(readFileSync(planPath, "utf8")) as Plan;
const stopAfter = Number(stopAfterText);

const named = new Map<string, string>();
const ref = (name: string | undefined): string => named.get(name ?? "") ?? "";
// Puts the ids of earlier writes in place of their {names}.
const expand = (text: string | undefined): string =>
  (text ?? "").replace(/\{(\w+)\}/g, (whole, name: string) => named.get(name) ?? whole);
// The plan's JSON goes out exactly as written there, as a model's output would.
const json = (value: unknown) => rawJson(JSON.stringify(value));

async function perform(attempt: Attempt, w: PlannedWrite): Promise<{ id: string; outcome: Outcome }> {
  switch (w.op) {
    case "create_thread":
      return attempt.createThread(w.title ?? "");
    case "create":
      return attempt.create(w.kind ?? "", json(w.data));
    case "edit":
      return attempt.edit(ref(w.artifact), w.path ?? "", json(w.value));
    case "notice":
      return attempt.notice(ref(w.thread), expand(w.text));
    case "send":
      return attempt.send(ref(w.thread), expand(w.text));
    case "step": {
      const step = await attempt.beginStep(w.tool ?? "", w.effect ?? "NON_IDEMPOTENT_WRITE", json(w.args));
      if (!step.done) await attempt.endStep(step.id, json(w.result));
      return step;
    }
    default:
      throw new Error(`unknown op ${w.op}`);
  }
}

const client = new Client(target);
const attempt = await client.begin({ runId: plan.run_id, rule: plan.rule, checkpoint: plan.checkpoint });
for (const [i, w] of plan.writes.entries()) {
  if (i === stopAfter) process.exit(3); // dies mid-run: no EndAttempt
  const { id, outcome } = await perform(attempt, w);
  if (w.as) named.set(w.as, id);
  process.stdout.write(JSON.stringify({ op: w.op, id, outcome }) + "\n");
}
await attempt.end();
client.close();
