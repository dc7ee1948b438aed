/**
 * The channel's retry policy: UNAVAILABLE is retried with the same request_id.
 *
 * The server here answers the first try of every create with UNAVAILABLE, as a
 * draining sidecar does. It stands in for the transport, not for the sidecar's
 * rules, which the other tests check against a real sidecar.
 */
import { Server, ServerCredentials, status, type UntypedServiceImplementation } from "@grpc/grpc-js";
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client } from "../src/index.js";
import { RunActionsServiceService } from "../src/gen/actonce/v1/run_actions.js";
import { Outcome } from "../src/gen/actonce/v1/types.js";

test("UNAVAILABLE is retried with the same request_id", async () => {
  const tries: string[] = [];
  const draining: UntypedServiceImplementation = {
    beginAttempt: (_call: unknown, done: (e: null, r: object) => void) => done(null, { attemptId: "att_1" }),
    create: (call: { request: { requestId: string } }, done: (e: object | null, r?: object) => void) => {
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
  const client = new Client(`127.0.0.1:${port}`);
  try {
    const attempt = await client.begin({ runId: "run-1", rule: "rule" });
    for (let i = 0; i < 2; i++) assert.equal((await attempt.create("ticket", { n: 1 })).outcome, "APPLIED");
  } finally {
    client.close();
    server.forceShutdown();
  }
  const [first, firstRetry, second, secondRetry] = tries;
  assert.equal(tries.length, 4);
  assert.equal(firstRetry, first);
  assert.equal(secondRetry, second);
  assert.notEqual(first, second);
});
