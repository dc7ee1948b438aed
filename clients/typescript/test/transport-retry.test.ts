/**
 * The channel: every call has a deadline, and UNAVAILABLE is retried with the
 * same request_id.
 *
 * The server here answers the first try of every create with UNAVAILABLE, as a
 * draining sidecar does, and records what each call carried. It stands in for
 * the transport, not for the sidecar's rules, which the other tests check
 * against a real sidecar.
 */
import { Server, ServerCredentials, status, type UntypedServiceImplementation } from "@grpc/grpc-js";
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client } from "../src/index.js";
import { RunActionsServiceService } from "../src/gen/actonce/v1/run_actions.js";
import { Outcome } from "../src/gen/actonce/v1/types.js";

type Call<Req> = { request: Req; getDeadline(): Date | number };

test("every call has a deadline; UNAVAILABLE is retried with the same request_id", async () => {
  const tries: string[] = [];
  const deadlines: number[] = [];
  const draining: UntypedServiceImplementation = {
    beginAttempt: (call: Call<unknown>, done: (e: null, r: object) => void) => {
      deadlines.push(Number(call.getDeadline()));
      done(null, { attemptId: "att_1", idSchemeVersion: 1 });
    },
    create: (call: Call<{ requestId: string }>, done: (e: object | null, r?: object) => void) => {
      deadlines.push(Number(call.getDeadline()));
      tries.push(call.request.requestId);
      if (tries.length % 2 === 1) done({ code: status.UNAVAILABLE, details: "draining" });
      else done(null, { id: "art_1", outcome: Outcome.OUTCOME_APPLIED, version: 1 });
    },
  };
  const server = new Server();
  server.addService(RunActionsServiceService, draining);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (error, bound) =>
      error ? reject(error) : resolve(bound),
    ),
  );
  const client = new Client(`127.0.0.1:${port}`, { timeoutMs: 7_000 });
  const started = Date.now();
  try {
    const attempt = await client.begin({ runId: "run-1", rule: "rule" });
    for (let i = 0; i < 2; i++) assert.equal((await attempt.create("ticket", { n: 1 })).outcome, "APPLIED");
  } finally {
    client.close();
    server.forceShutdown();
  }
  // A call with no deadline shows the server Infinity; the grpc-timeout header
  // rounds up, hence a little slack.
  assert.equal(deadlines.length, 5);
  for (const deadline of deadlines) assert.ok(deadline <= started + 7_500, `deadline ${deadline - started} ms away`);
  const [first, firstRetry, second, secondRetry] = tries;
  assert.equal(tries.length, 4);
  assert.equal(firstRetry, first);
  assert.equal(secondRetry, second);
  assert.notEqual(first, second);
});
