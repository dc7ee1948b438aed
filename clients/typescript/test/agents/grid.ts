/**
 * The TypeScript kill grid: every framework's scenario run by a worker process killed with
 * SIGKILL after every write and as every model call starts (and, in a scenario whose charge
 * has no idempotency key, once the charge was made), each job delivered again until done; a
 * table of kills, duplicates, losses and runs parked.
 *
 *     node build/test/agents/grid.js            every kill (make test-ts-agents)
 *     node build/test/agents/grid.js --quick    every third kill (inside make test), of a
 *                                               framework's `quick` scenarios
 *     node build/test/agents/grid.js --only langgraph   the frameworks whose name has it
 *
 * Real parts: `actonce serve`, a card processor over HTTP, the framework's real runner
 * with a model scripted as a real one answers (fresh tool-call ids on every call, parallel
 * calls shuffled, texts reworded). A run that parks on a charge in doubt is resolved as a
 * person would (`actonce audit resolve`, from what the card processor shows) and delivered
 * again. Exits 1 when any run duplicated or lost a write.
 */
import { execFile, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";

import { Client } from "../../src/index.js";
import { actonceBinary, freePort, REPO_DIR, type Sidecar, startSidecar } from "../sidecar.js";
import { type Job, type Result, RULE } from "./worker.js";
import { canonical, CardProcessor } from "./scripted.js";

const HERE = fileURLToPath(new URL(".", import.meta.url));

/** What one run must leave: ticket titles, notice texts, charges (customer, cents). */
export interface Seen {
  tickets: string[];
  notices: string[];
  charges: [string, number][];
}

function expect(tickets: string[], notices: string[], charges: [string, number][]): Seen {
  return { tickets: [...tickets].sort(), notices: [...notices].sort(), charges: [...charges].sort() };
}

const PARALLEL = expect(
  ["Disk full", "Disk full"],
  ["charged ada 500", "opened a ticket: Disk full", "opened a ticket: Disk full"],
  [["ada", 500]],
);

/** A charge with no idempotency key beside a ticket: in doubt when killed after it was made. */
const UNKEYED = expect(["Refund later"], ["charged cy 900", "opened a ticket: Refund later"], [["cy", 900]]);

/** A framework's row: its worker module, its scenarios with what each leaves, its world. */
export interface Framework {
  name: string;
  worker: string;
  scenarios: Record<string, Seen>;
  /** The scenarios the quick form runs (default: every one). */
  quick?: string[];
  world: <T>(body: (world: World) => Promise<T>) => Promise<T>;
}

export const GRID: Framework[] = [
  {
    name: "AI SDK",
    worker: "ai-sdk-worker.js",
    scenarios: {
      generate: PARALLEL,
      stream: PARALLEL,
      agent: PARALLEL,
      retry: expect([], ["charged bob 700", "looking into it"], [["bob", 700]]),
      unkeyed: UNKEYED,
    },
    world: withCardWorld,
  },
  {
    // Mastra's agent on the AI SDK's durable model, its tools Mastra tools.
    name: "Mastra",
    worker: "mastra-worker.js",
    scenarios: { "mastra-generate": PARALLEL },
    world: withCardWorld,
  },
  {
    // The OpenAI Agents SDK's runner: parallel calls, run and streamed, a handoff, an approval.
    name: "OpenAI Agents SDK",
    worker: "openai-agents-worker.js",
    scenarios: {
      "agents-parallel": PARALLEL,
      "agents-stream": PARALLEL,
      "agents-handoff": PARALLEL,
      "agents-approval": expect(["Disk full"], ["charged ada 500", "opened a ticket: Disk full"], [["ada", 500]]),
      "agents-unkeyed": UNKEYED,
    },
    // The handoff's billing agent makes the parallel calls.
    quick: ["agents-handoff", "agents-approval", "agents-unkeyed"],
    world: withCardWorld,
  },
  {
    // LangGraph.js: a model node and a ToolNode, with a checkpointer that outlives the worker
    // (the model as it is) and with none (the model a durable model).
    name: "LangGraph.js",
    worker: "langgraph-worker.js",
    scenarios: { "langgraph-checkpointer": PARALLEL, "langgraph-durable": PARALLEL, "langgraph-unkeyed": UNKEYED },
    quick: ["langgraph-checkpointer", "langgraph-durable", "langgraph-unkeyed"],
    world: withCardWorld,
  },
  {
    // Every write through the MCP front and gateway: a ticket and a notice (the sidecar's own
    // tools), a keyed charge made twice by two tool calls, a charge with no key.
    name: "AI SDK, MCP gateway",
    worker: "mcp-worker.js",
    scenarios: {
      mcp: expect(
        ["Disk full"],
        ["opened a ticket: Disk full"],
        [
          ["ada", 500],
          ["ada", 500],
          ["bob", 700],
        ],
      ),
    },
    world: withGatewayWorld,
  },
];

export interface World {
  sidecar: Sidecar;
  client: Client;
  folder: string;
  /** Where the worker's charges go: the card processor, or the MCP front. */
  processor: string;
  /** The charges of the run's customers: (customer without the run's prefix, cents). */
  charged(runId: string): [string, number][];
  /** The id of the run's charge with no idempotency key, if it was made (one per run). */
  unkeyedCharge(runId: string): string | undefined;
}

/** Where a run is killed: after its `write`-th write, as its `modelCall`-th model call starts,
 * or once its first card charge was made (`charge`). */
export interface Kill {
  write?: number;
  modelCall?: number;
  charge?: true;
}

/** One delivery in a process of its own; undefined when it killed itself. */
export async function deliverOnce(framework: Framework, job: Job): Promise<Result | undefined> {
  rmSync(job.result, { force: true });
  const child = spawn(process.execPath, ["--no-warnings", join(HERE, framework.worker), JSON.stringify(job)], {
    stdio: ["ignore", "inherit", "inherit"],
  });
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((done) =>
    child.once("exit", (c, s) => done([c, s])),
  );
  if (signal === "SIGKILL") return undefined;
  if (code !== 0 || !existsSync(job.result)) throw new Error(`the delivery ended with ${code ?? signal}`);
  return JSON.parse(readFileSync(job.result, "utf8")) as Result;
}

async function newJob(world: World, scenario: string): Promise<Job> {
  const runId = `${scenario}-${randomUUID().slice(0, 8)}`;
  const setup = await world.client.begin({ runId: `setup-${runId}`, rule: RULE });
  const threadId = (await setup.createThread(`thread of ${runId}`)).id;
  await setup.end();
  return {
    scenario,
    runId,
    target: world.sidecar.target,
    processor: world.processor,
    threadId,
    result: join(world.folder, `${runId}.json`),
  };
}

const audit = (world: World, ...args: string[]) =>
  promisify(execFile)(actonceBinary(), ["audit", ...args, "--audit-db", join(world.sidecar.dataDir, "audit.db")]);

/** Decide each parked item as a person would: the card processor shows whether the run's
 * charge with no idempotency key (one per run in the grid) was made. */
export async function resolveParked(world: World, job: Job, items: string[]): Promise<void> {
  for (const id of items) {
    const made = world.unkeyedCharge(job.runId);
    const decision = made ? ["--ran", "--result-json", JSON.stringify(made)] : ["--did-not-run"];
    await audit(world, "resolve", id, ...decision, "--by", "grid@example.com", "--reason", "the processor says");
  }
}

/** Every delivery of a run until it is done; with `kill`, its first is killed there. */
export async function runToEnd(
  framework: Framework,
  world: World,
  job: Job,
  kill?: Kill,
): Promise<{ results: Result[]; parked: boolean }> {
  if (kill !== undefined) {
    const killed = await deliverOnce(framework, {
      ...job,
      killAt: kill.write ?? 0,
      killAtModel: kill.modelCall ?? 0,
      killAtCharge: kill.charge ?? false,
    });
    if (killed !== undefined) throw new Error(`not killed at ${JSON.stringify(kill)}: ${JSON.stringify(killed)}`);
  }
  const results: Result[] = [];
  let parked = false;
  for (let i = 0; i < 4; i++) {
    const result = await deliverOnce(framework, job);
    if (result === undefined) throw new Error("a delivery killed itself unasked");
    results.push(result);
    if (result.parked.length === 0) break;
    parked = true;
    await resolveParked(world, job, result.parked);
  }
  return { results, parked };
}

export function seen(world: World, job: Job): Seen {
  const store = existsSync(join(world.sidecar.dataDir, "store.db")) ? "store.db" : "audit.db";
  // node:sqlite is Node 22's; the grid runs under Node 22 with the AI SDK.
  const { DatabaseSync } = sqlite;
  const db = new DatabaseSync(join(world.sidecar.dataDir, store), { readOnly: true });
  try {
    const tickets = db
      .prepare(
        "SELECT json_extract(data_json, '$.title') AS t FROM artifacts WHERE kind = 'ticket'" +
          " AND json_extract(data_json, '$.run') = ?",
      )
      .all(job.runId)
      .map((row: { t: string }) => canonical(row.t));
    const notices = db
      .prepare("SELECT text AS t FROM messages WHERE thread_id = ?")
      .all(job.threadId)
      .map((row: { t: string }) => canonical(row.t));
    return expect(tickets, notices, world.charged(job.runId));
  } finally {
    db.close();
  }
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const sqlite: any = await import("node:sqlite" as string);

export class Tally {
  kills = 0;
  duplicates = 0;
  losses = 0;
  parked = 0;
  readonly failures: string[] = [];

  add(kill: Kill | undefined, expected: Seen, found: Seen, state: string, parked: boolean): void {
    if (kill !== undefined) this.kills++;
    if (parked) this.parked++;
    const parts = (s: Seen): string[][] => [s.tickets, s.notices, s.charges.map((c) => c.join(" "))];
    const same = JSON.stringify(parts(found)) === JSON.stringify(parts(expected));
    if (same && state === "done") return;
    const more = parts(found).some((f, i) => hasMore(f, parts(expected)[i]!));
    const fewer = parts(found).some((f, i) => hasMore(parts(expected)[i]!, f));
    if (more) this.duplicates++;
    if (fewer || !more) this.losses++;
    this.failures.push(`${JSON.stringify(kill)}: ${state}: ${JSON.stringify(found)} != ${JSON.stringify(expected)}`);
  }
}

function hasMore(a: string[], b: string[]): boolean {
  return a.some((x) => a.filter((y) => y === x).length > b.filter((y) => y === x).length);
}

/** The kills of a run whose clean delivery made `result`: after each write, as each model call starts. */
export function killsOf(result: Result): Kill[] {
  const kills: Kill[] = [];
  for (let k = 1; k <= result.writes; k++) kills.push({ write: k });
  for (let m = 1; m <= result.modelCalls; m++) kills.push({ modelCall: m });
  return kills;
}

/** Runs of a scenario made at once. */
const CONCURRENT_RUNS = 3;

/** Run `scenario` once cleanly, then once per kill (every `every`-th), each delivered again until done. */
export async function tallyEveryKill(framework: Framework, world: World, scenario: string, every = 1): Promise<Tally> {
  const expected = framework.scenarios[scenario]!;
  const tally = new Tally();
  const clean = await newJob(world, scenario);
  const { results, parked } = await runToEnd(framework, world, clean);
  tally.add(undefined, expected, seen(world, clean), results.at(-1)!.state, parked);
  const kills = killsOf(results[0]!);
  if (kills.length === 0) throw new Error(`${scenario} makes no write`);
  // Runs of one scenario are apart (each its own run id and thread): a few at once, since
  // a worker process spends most of its life starting up and waiting on the sidecar.
  const chosen = kills.filter((_, i) => i % every === 0);
  // A charge with no idempotency key is in doubt only when the kill follows it, and which
  // write it is changes with the order of the parallel calls: one kill follows it in every form.
  if (scenario.endsWith("unkeyed")) chosen.push({ charge: true });
  const next = async (): Promise<void> => {
    for (let kill = chosen.shift(); kill !== undefined; kill = chosen.shift()) {
      const job = await newJob(world, scenario);
      const run = await runToEnd(framework, world, job, kill);
      tally.add(kill, expected, seen(world, job), run.results.at(-1)!.state, run.parked);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENT_RUNS }, next));
  return tally;
}

async function withSidecar<T>(flags: string[], world: Omit<World, "sidecar" | "client" | "folder">, body: (world: World) => Promise<T>): Promise<T> {
  const sidecar = await startSidecar(...flags);
  const client = new Client(sidecar.target);
  const folder = mkdtempSync(join(tmpdir(), "actonce-ts-grid-"));
  try {
    return await body({ ...world, sidecar, client, folder });
  } finally {
    client.close();
    await sidecar.stop();
    rmSync(folder, { recursive: true, force: true });
  }
}

/** A sidecar and a card processor over HTTP. */
export async function withCardWorld<T>(body: (world: World) => Promise<T>): Promise<T> {
  const processor = await new CardProcessor().start();
  try {
    return await withSidecar(
      [],
      {
        processor: processor.url,
        charged: (runId) => processor.chargedFor(runId),
        unkeyedCharge: (runId) => processor.charges.find((c) => c.customer.startsWith(`${runId}-`) && c.key === null)?.id,
      },
      body,
    );
  } finally {
    await processor.stop();
  }
}

/** What the operator's effects file says of the payments tools (as the Python grid's MCP row). */
const EFFECTS = {
  payments__charge: "TOOL_EFFECT_NON_IDEMPOTENT_WRITE",
  payments__charge_keyed: {
    effect: "TOOL_EFFECT_NON_IDEMPOTENT_WRITE",
    idempotency_key: { argument: "idempotency_key" },
  },
};

/**
 * A sidecar whose MCP gateway fronts the gateway tests' payments MCP server
 * (tests/fronts/mcp/charges.py, a process of its own that logs each charge it makes).
 */
export async function withGatewayWorld<T>(body: (world: World) => Promise<T>): Promise<T> {
  const folder = mkdtempSync(join(tmpdir(), "actonce-ts-payments-"));
  const log = join(folder, "payments.log");
  const port = await freePort();
  const python = process.env["ACTONCE_PYTHON"] || join(REPO_DIR, ".venv", "bin", "python");
  const payments = spawn(python, ["-m", "tests.fronts.mcp.charges", "--port", String(port), "--log", log], {
    cwd: REPO_DIR,
    stdio: "ignore",
  });
  const exited = new Promise<void>((done) => payments.once("exit", () => done()));
  try {
    await listening(port, payments);
    writeFileSync(join(folder, "effects.json"), JSON.stringify(EFFECTS));
    const front = await freePort();
    const flags = ["--mcp-listen", `127.0.0.1:${front}`, "--mcp-upstream", `payments=http://127.0.0.1:${port}/mcp`,
                   "--tool-effects", join(folder, "effects.json")]; // prettier-ignore
    const lines = () => (existsSync(log) ? readFileSync(log, "utf8").split("\n").filter((l) => l) : []);
    // "charge CUSTOMER CENTS" for a charge with no key; "keyed KEY CUSTOMER CENTS" for a keyed one.
    const made = (runId: string) =>
      lines()
        .map((line) => line.split(" "))
        .map((w) => (w[0] === "charge" ? [w[1]!, w[2]!] : w[0] === "keyed" ? [w[2]!, w[3]!] : undefined))
        .filter((c): c is [string, string] => c !== undefined && c[0].startsWith(`${runId}-`))
        .map(([c, n]): [string, number] => [c.slice(runId.length + 1), Number(n)]);
    return await withSidecar(
      flags,
      {
        processor: `http://127.0.0.1:${front}/mcp`,
        charged: made,
        unkeyedCharge: (runId) =>
          lines().some((line) => line.startsWith(`charge ${runId}-`)) ? `charged by hand for ${runId}` : undefined,
      },
      body,
    );
  } finally {
    payments.kill("SIGKILL");
    await exited;
    rmSync(folder, { recursive: true, force: true });
  }
}

async function listening(port: number, child: ReturnType<typeof spawn>): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if (child.exitCode !== null) throw new Error("the payments MCP server exited");
    const open = await new Promise<boolean>((done) => {
      const probe = connect(port, "127.0.0.1", () => {
        probe.destroy();
        done(true);
      });
      probe.once("error", () => done(false));
    });
    if (open) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("the payments MCP server did not start");
}

export type Row = [string, string, Tally];

/** Every framework's scenarios, every `every`-th kill (3 is the quick form, which runs a
 * framework's `quick` scenarios only). */
export async function runGrid(every: number, only = "", log = (_: string) => {}): Promise<Row[]> {
  const rows: Row[] = [];
  for (const framework of GRID) {
    if (only && !framework.name.toLowerCase().includes(only.toLowerCase())) continue;
    const scenarios = every > 1 && framework.quick ? framework.quick : Object.keys(framework.scenarios);
    await framework.world(async (world) => {
      for (const scenario of scenarios) {
        const started = Date.now();
        const tally = await tallyEveryKill(framework, world, scenario, every);
        rows.push([framework.name, scenario, tally]);
        log(`  ${framework.name} / ${scenario}: ${tally.kills} kills in ${((Date.now() - started) / 1000).toFixed(1)}s`);
      }
    });
  }
  return rows;
}

export function table(rows: Row[]): string {
  const lines = ["| framework | scenario | kills | duplicates | losses | parked |", "| --- | --- | ---: | ---: | ---: | ---: |"];
  const total = new Tally();
  for (const [name, scenario, t] of rows) {
    lines.push(`| ${name} | ${scenario} | ${t.kills} | ${t.duplicates} | ${t.losses} | ${t.parked} |`);
    total.kills += t.kills;
    total.duplicates += t.duplicates;
    total.losses += t.losses;
    total.parked += t.parked;
  }
  lines.push(`| all | ${rows.length} scenarios | ${total.kills} | ${total.duplicates} | ${total.losses} | ${total.parked} |`);
  return lines.join("\n");
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const quick = process.argv.includes("--quick");
  const onlyAt = process.argv.indexOf("--only");
  const only = onlyAt > 0 ? (process.argv[onlyAt + 1] ?? "") : "";
  const rows = await runGrid(quick ? 3 : 1, only, (line) => process.stderr.write(`${line}\n`));
  console.log(table(rows));
  const failures = rows.flatMap(([name, scenario, t]) => t.failures.map((f) => `${name} / ${scenario}: ${f}`));
  for (const failure of failures) console.log(failure);
  process.exitCode = failures.length > 0 ? 1 : 0;
}
