/**
 * Every case of docs/status-cases.json, answered for real by the stand-in
 * sidecar (clients/testkit/status_sidecar.py, raw trailers included), gives
 * its typed result, and none crashes the process or leaves a promise
 * unsettled; the other three clients read the same file.
 */
import { status } from "@grpc/grpc-js";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { ActonceError, type Attempt, Client, newRequestId } from "../src/index.js";
import { REPO_DIR } from "./sidecar.js";
import { type Program, startTestkit } from "./testkit.js";

interface StatusCase {
  name: string;
  expect: {
    outcome?: string;
    error?: { code: string; reason: string; failure_class: string; violations: string[] };
  };
}

const cases = (
  JSON.parse(readFileSync(join(REPO_DIR, "docs", "status-cases.json"), "utf8")) as { cases: StatusCase[] }
).cases;

let fake: Program;
let client: Client;
let attempt: Attempt;
before(async () => {
  fake = await startTestkit("status_sidecar.py");
  client = new Client(fake.target);
  attempt = await client.begin({ runId: "run-status-cases", rule: "rule" });
});
after(async () => {
  client.close();
  await fake.stop();
});

test("there are status cases", () => assert.ok(cases.length > 0));

for (const c of cases) {
  test(`status case: ${c.name}`, async () => {
    const requestId = newRequestId();
    const want = c.expect.error;
    if (want === undefined) {
      const written = await attempt.create(c.name, {}, { requestId });
      assert.equal(written.outcome, c.expect.outcome);
      return;
    }
    await assert.rejects(attempt.create(c.name, {}, { requestId }), (error: unknown) => {
      assert.ok(error instanceof ActonceError, String(error));
      assert.equal(status[error.code], want.code);
      assert.equal(error.reason, want.reason);
      assert.equal(error.failureClass, want.failure_class);
      assert.deepEqual(
        error.violations.map((v) => v.field),
        want.violations,
      );
      assert.equal(error.requestId, requestId);
      return true;
    });
  });
}
