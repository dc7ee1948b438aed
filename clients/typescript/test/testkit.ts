/**
 * The shared test programs of clients/testkit, run by the repository's Python:
 * each prints its target, then answers commands line by line, and stops when
 * its stdin closes.
 */
import { spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";

import { REPO_DIR } from "./sidecar.js";

export interface Program {
  target: string;
  command(line: string): Promise<string>;
  stop(): Promise<void>;
}

function python(): string {
  return process.env["ACTONCE_PYTHON"] || join(REPO_DIR, ".venv", "bin", "python");
}

export async function startTestkit(script: string, ...args: string[]): Promise<Program> {
  const child = spawn(python(), [join(REPO_DIR, "clients", "testkit", script), ...args], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  const exited = new Promise<void>((done) => child.once("exit", () => done()));
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const next = async (): Promise<string> => {
    const { value, done } = await lines.next();
    if (done) throw new Error(`${script} ended`);
    return String(value).trim();
  };
  const target = await next();
  return {
    target,
    async command(line: string): Promise<string> {
      child.stdin.write(line + "\n");
      return next();
    },
    async stop(): Promise<void> {
      child.stdin.end();
      await exited;
    },
  };
}
