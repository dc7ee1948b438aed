/**
 * The API token against a real sidecar started with --api-token-file: every RPC
 * refuses a call without it and takes one with it; the client finds the token in
 * its options or its environment, and follows a file that changes.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { mkdtempSync, renameSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { credentials, Metadata, type ServiceError, status } from "@grpc/grpc-js";

import { API_TOKEN_ENV, API_TOKEN_FILE_ENV, Attempt, Client } from "../src/index.js";
import { RunActionsServiceClient, RunActionsServiceService } from "../src/gen/actonce/v1/run_actions.js";
import { ApiToken, REREAD_MS } from "../src/token.js";
import { rejection, SEND_RULE, type Sidecar, startSidecar } from "./sidecar.js";

const TOKEN = "ts-t0ken-6d02";
const folder = mkdtempSync(join(tmpdir(), "actonce-ts-token-"));
const tokenFile = join(folder, "api.token");
let sidecar: Sidecar;

/** Swap a new token file in whole, as the kubelet updates a Secret. */
function writeToken(path: string, token: string): void {
  writeFileSync(`${path}.new`, `${token}\n`);
  renameSync(`${path}.new`, path);
}

before(async () => {
  // A client given no token reads these: this file's tests say what they hold.
  delete process.env[API_TOKEN_FILE_ENV];
  delete process.env[API_TOKEN_ENV];
  writeToken(tokenFile, TOKEN);
  sidecar = await startSidecar("--api-token-file", tokenFile);
});

after(async () => {
  await sidecar.stop();
});

const runId = () => `run-${randomUUID()}`;

type Call = (client: Client, attempt: Attempt) => Promise<unknown>;

/** An attempt with what each call needs, and one call of every RPC through the client. */
async function everyRpc(client: Client): Promise<[Attempt, Record<string, Call>]> {
  const attempt = await client.begin({ runId: runId(), rule: SEND_RULE, checkpoint: "cp" });
  const ticket = await attempt.create("ticket", { n: 1 });
  const thread = await attempt.createThread("incident");
  const step = await attempt.beginStep("charge", "NON_IDEMPOTENT_WRITE", { amount: 1 });
  const unused = await attempt.beginStep("page", "NON_IDEMPOTENT_WRITE", { who: "ops" });
  const lease = new Date(Date.now() + 3_600_000);
  lease.setMilliseconds(0);
  return [
    attempt,
    {
      BeginAttempt: (c) => c.begin({ runId: runId(), rule: SEND_RULE }),
      Create: (_c, a) => a.create("ticket", { n: 2 }),
      Edit: (_c, a) => a.edit(ticket.id, "/status", "open"),
      Notice: (_c, a) => a.notice(thread.id, "filed"),
      CreateThread: (_c, a) => a.createThread("another"),
      Send: (_c, a) => a.send(thread.id, "please look"),
      Read: (_c, a) => a.readArtifact(ticket.id),
      BeginStep: (_c, a) => a.beginStep("refund", "IDEMPOTENT_WRITE", {}),
      EndStep: (_c, a) => a.endStep(step.id, { charged: true }),
      AbortStep: (_c, a) => a.abortStep(unused.id, "never called"),
      ExtendLease: (_c, a) => a.extendLease(lease),
      EndAttempt: (_c, a) => a.end(),
    },
  ];
}

/** Each RPC of the service, called raw with an empty request: its status code and ErrorInfo. */
async function rawCall(path: string, metadata: Metadata): Promise<ServiceError | null> {
  const raw = new RunActionsServiceClient(sidecar.target, credentials.createInsecure());
  try {
    return await new Promise((done) =>
      raw.makeUnaryRequest(
        path,
        (value: Buffer) => value,
        (value: Buffer) => value,
        Buffer.alloc(0),
        metadata,
        { deadline: Date.now() + 5000 },
        (error) => done(error),
      ),
    );
  } finally {
    raw.close();
  }
}

describe("with an API token on the sidecar", () => {
  test("every RPC refuses a call without the token and takes it with it", async () => {
    const rpcs = Object.values(RunActionsServiceService).map((m) => m.path.split("/").pop());
    for (const path of Object.values(RunActionsServiceService).map((m) => m.path)) {
      const error = await rawCall(path, new Metadata());
      assert.equal(error?.code, status.UNAUTHENTICATED, path);
    }
    const client = new Client(sidecar.target, { apiTokenFile: tokenFile });
    try {
      const [attempt, calls] = await everyRpc(client);
      assert.deepEqual(Object.keys(calls).sort(), [...rpcs].sort(), "a new RPC needs its call here");
      for (const options of [{}, { apiToken: "not-the-token" }]) {
        const other = new Client(sidecar.target, options);
        try {
          const theirs = new Attempt(other, attempt.id, attempt.run, attempt.idScheme);
          for (const [rpc, call] of Object.entries(calls)) {
            const error = await rejection(call(other, theirs));
            assert.deepEqual([error.code, error.reason, error.failureClass], [
              status.UNAUTHENTICATED,
              "UNAUTHENTICATED",
              "PERMANENT",
            ], rpc);
          }
        } finally {
          other.close();
        }
      }
      // Nothing of those landed: with the token each call is the first of its kind.
      const results: Record<string, unknown> = {};
      for (const [rpc, call] of Object.entries(calls)) results[rpc] = await call(client, attempt);
      assert.equal((results["Create"] as { outcome: string }).outcome, "APPLIED");
      assert.equal(results["EndStep"], "APPLIED");
      // 4 made first, then 6 writes and steps: an end or an abort is not a write.
      assert.equal((results["EndAttempt"] as { applied: number }).applied, 10);
    } finally {
      client.close();
    }
  });

  test("the token comes from an option, else ACTONCE_API_TOKEN_FILE, else ACTONCE_API_TOKEN", async () => {
    const saved = { file: process.env[API_TOKEN_FILE_ENV], value: process.env[API_TOKEN_ENV] };
    const cases: [string, Record<string, string>, { apiToken?: string; apiTokenFile?: string }][] = [
      ["apiToken", {}, { apiToken: TOKEN }],
      ["apiTokenFile", {}, { apiTokenFile: tokenFile }],
      [API_TOKEN_FILE_ENV, { [API_TOKEN_FILE_ENV]: tokenFile }, {}],
      [API_TOKEN_ENV, { [API_TOKEN_ENV]: TOKEN }, {}],
      ["an option over the environment", { [API_TOKEN_ENV]: "wrong" }, { apiToken: TOKEN }],
      ["the file over the value", { [API_TOKEN_FILE_ENV]: tokenFile, [API_TOKEN_ENV]: "wrong" }, {}],
    ];
    try {
      for (const [name, env, options] of cases) {
        delete process.env[API_TOKEN_FILE_ENV];
        delete process.env[API_TOKEN_ENV];
        Object.assign(process.env, env);
        const client = new Client(sidecar.target, options);
        try {
          assert.ok((await client.begin({ runId: runId(), rule: "any" })).id, name);
        } finally {
          client.close();
        }
      }
    } finally {
      for (const [key, value] of [
        [API_TOKEN_FILE_ENV, saved.file],
        [API_TOKEN_ENV, saved.value],
      ] as const) {
        if (value === undefined) delete process.env[key];
        else process.env[key] = value;
      }
    }
  });

  test("a token file is followed as it changes, and one without a token is refused at once", () => {
    let now = 0;
    const path = join(folder, "rotating.token");
    writeToken(path, "first");
    const token = ApiToken.fromFile(path, () => now);
    writeToken(path, "second");
    assert.equal(token.value(), "first"); // read at most once a second
    now += REREAD_MS;
    assert.equal(token.value(), "second");
    unlinkSync(path);
    now += REREAD_MS;
    assert.equal(token.value(), "second"); // caught mid-update: the last token stays
    assert.ok(!String(token).includes("second"));
    const empty = join(folder, "empty.token");
    writeFileSync(empty, "\n");
    assert.throws(() => new Client(sidecar.target, { apiTokenFile: empty }), /empty/);
    assert.throws(() => new Client(sidecar.target, { apiTokenFile: join(folder, "missing") }));
  });
});
