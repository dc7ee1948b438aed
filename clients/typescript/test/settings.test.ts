/**
 * The client's own settings, refused when it is made, with what to write instead: a
 * target written as a URL, no target at all, an API token file that is not there. Each
 * is an ActonceError (INVALID_ARGUMENT, PERMANENT) naming the setting as it was given.
 */
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { status } from "@grpc/grpc-js";

import { ActonceError, API_TOKEN_ENV, API_TOKEN_FILE_ENV, Client, TARGET_ENV } from "../src/index.js";
import { type Sidecar, startSidecar } from "./sidecar.js";

function refused(error: unknown, setting: string): string {
  assert.ok(error instanceof ActonceError, String(error));
  assert.deepEqual(
    [error.code, error.reason, error.failureClass, error.permanent, error.retryable],
    [status.INVALID_ARGUMENT, "INVALID_ARGUMENT", "PERMANENT", true, false],
  );
  assert.deepEqual(
    error.violations.map((v) => v.field),
    [setting],
  );
  return error.message;
}

function thrown(make: () => unknown): unknown {
  try {
    make();
  } catch (error) {
    return error;
  }
  assert.fail("no error");
}

describe("the client's settings", () => {
  let sidecar: Sidecar;
  const saved = { ...process.env };
  before(async () => {
    sidecar = await startSidecar();
  });
  after(async () => {
    await sidecar.stop();
  });
  const clean = () => {
    for (const name of [TARGET_ENV, API_TOKEN_FILE_ENV, API_TOKEN_ENV]) delete process.env[name];
  };
  const restore = () => {
    clean();
    for (const name of [TARGET_ENV, API_TOKEN_FILE_ENV, API_TOKEN_ENV]) {
      if (saved[name] !== undefined) process.env[name] = saved[name];
    }
  };

  test("a target written as a URL is refused at once, saying to write HOST:PORT", () => {
    for (const url of ["http://127.0.0.1:50051", "https://127.0.0.1:50051/", "grpc://127.0.0.1:50051"]) {
      const message = refused(
        thrown(() => new Client(url)),
        "target",
      );
      assert.ok(message.includes("HOST:PORT (127.0.0.1:50051)") && message.includes(url), message);
    }
  });

  test("without a target the client dials ACTONCE_TARGET, and without that says so", async () => {
    clean();
    try {
      process.env[TARGET_ENV] = sidecar.target;
      const client = new Client();
      try {
        const attempt = await client.begin({ runId: `run-target-${Date.now()}`, rule: "triage" });
        assert.equal((await attempt.create("ticket", { n: 1 })).outcome, "APPLIED");
      } finally {
        client.close();
      }
      process.env[TARGET_ENV] = "http://127.0.0.1:1";
      assert.ok(refused(thrown(() => new Client()), TARGET_ENV).includes("is a URL"));
      delete process.env[TARGET_ENV];
      assert.ok(refused(thrown(() => new Client()), TARGET_ENV).includes("HOST:PORT"));
    } finally {
      restore();
    }
  });

  test("a missing token file is the client's error naming where it was given", () => {
    clean();
    try {
      const missing = join(mkdtempSync(join(tmpdir(), "actonce-settings-")), "api.token");
      const given = refused(
        thrown(() => new Client("127.0.0.1:1", { apiTokenFile: missing })),
        "apiTokenFile",
      );
      assert.ok(given.includes(missing) && given.includes("ENOENT"), given);
      process.env[API_TOKEN_FILE_ENV] = missing;
      assert.ok(refused(thrown(() => new Client("127.0.0.1:1")), API_TOKEN_FILE_ENV).includes(missing));
    } finally {
      restore();
    }
  });
});
