/**
 * A real `actonce serve` for the tests: a free loopback port, data in a
 * temporary folder, ready once its health service says SERVING.
 */
import assert from "node:assert/strict";
import { credentials, makeGenericClientConstructor, type ServiceError } from "@grpc/grpc-js";
import { service as healthService } from "grpc-health-check";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";

import { ActonceError, Client } from "../src/index.js";

/** The one rule the test sidecar's send allowlist names. */
export const SEND_RULE = "allowed-sender";

/** The package's folder (the tests run from build/test). */
export const PACKAGE_DIR = resolve(fileURLToPath(import.meta.url), "..", "..", "..");
export const REPO_DIR = resolve(PACKAGE_DIR, "..", "..");

export interface Sidecar {
  target: string;
  /** Its data folder: the ledger (audit.db) and the embedded store. */
  dataDir: string;
  stop(): Promise<void>;
}

export function actonceBinary(): string {
  return process.env["ACTONCE_BIN"] || join(REPO_DIR, ".venv", "bin", "actonce");
}

function withoutBinVariable(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  delete env["ACTONCE_BIN"];
  return env;
}

export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      probe.close(() => (typeof address === "object" && address ? resolvePort(address.port) : reject()));
    });
  });
}

type HealthCheck = (
  request: { service: string },
  options: { deadline: number },
  callback: (error: ServiceError | null, response?: { status: string }) => void,
) => void;

async function waitServing(target: string, child: ChildProcess, limitMs: number): Promise<void> {
  const Health = makeGenericClientConstructor(healthService, "Health");
  const health = new Health(target, credentials.createInsecure()) as unknown as { check: HealthCheck; close(): void };
  try {
    const until = Date.now() + limitMs;
    while (Date.now() < until) {
      if (child.exitCode !== null) throw new Error(`actonce serve exited with ${child.exitCode}`);
      const status = await new Promise<string | undefined>((done) =>
        health.check({ service: "actonce.v1.RunActionsService" }, { deadline: Date.now() + 1000 }, (error, response) =>
          done(error ? undefined : response?.status),
        ),
      );
      if (status === "SERVING") return;
      await sleep(100);
    }
    throw new Error(`actonce serve at ${target} was not SERVING within ${limitMs} ms`);
  } finally {
    health.close();
  }
}

/** Start `actonce serve`, with extra flags if any. */
export async function startSidecar(...flags: string[]): Promise<Sidecar> {
  const target = `127.0.0.1:${await freePort()}`;
  const dataDir = mkdtempSync(join(tmpdir(), "actonce-ts-test-"));
  const child = spawn(
    actonceBinary(),
    ["serve", "--listen", target, "--data-dir", dataDir, "--send-allowlist", SEND_RULE, "--log-level", "warning", ...flags],
    // `actonce serve` refuses ACTONCE_* variables it does not know, and
    // ACTONCE_BIN is this harness's, not the sidecar's.
    { stdio: ["ignore", "pipe", "pipe"], env: withoutBinVariable() },
  );
  let output = "";
  child.stdout?.on("data", (chunk) => (output += chunk));
  child.stderr?.on("data", (chunk) => (output += chunk));
  const exited = new Promise<void>((done) => child.once("exit", () => done()));
  const stop = async () => {
    child.kill("SIGKILL");
    await exited;
    rmSync(dataDir, { recursive: true, force: true });
  };
  try {
    await waitServing(target, child, 30_000);
  } catch (error) {
    await stop();
    throw new Error(`${(error as Error).message}\n${output}`);
  }
  return { target, dataDir, stop };
}

/** A sidecar (with extra flags if any) and a client on it for one test file: started before
 * its tests, stopped after them. */
export function liveSidecar(...flags: string[]): { readonly sidecar: Sidecar; readonly client: Client } {
  let sidecar: Sidecar | undefined;
  let client: Client | undefined;
  before(async () => {
    sidecar = await startSidecar(...flags);
    client = new Client(sidecar.target);
  });
  after(async () => {
    client?.close();
    await sidecar?.stop();
  });
  return {
    get sidecar() {
      assert.ok(sidecar !== undefined, "the sidecar starts before the file's tests");
      return sidecar;
    },
    get client() {
      assert.ok(client !== undefined, "the client is made before the file's tests");
      return client;
    },
  };
}

/** The ActonceError `promise` rejects with; the test fails if it resolves, or rejects with another error. */
export async function rejection(promise: Promise<unknown>): Promise<ActonceError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof ActonceError, `${error} is not an ActonceError`);
    return error;
  }
  assert.fail("the call succeeded");
}
