/**
 * A load agent for the drain test (clients/crosslang): it runs runs back to
 * back, three creates each, one JSON line per acknowledged write on stdout,
 * until a call fails; then it prints that failure as the client classified it,
 * and exits 0.
 *
 *   node build/test/drain-agent.js TARGET NAME
 */
import { status } from "@grpc/grpc-js";

import { ActonceError, Client, rawJson } from "../src/index.js";

const [target, name] = process.argv.slice(2);
if (!target || !name) throw new Error("usage: drain-agent TARGET NAME");

// As long a deadline as the other languages' agents: the drain test's slow store answers in
// 8 s, which a busy machine can stretch past the default 10 s.
const client = new Client(target, { timeoutMs: 30_000 });
try {
  for (let run = 0; ; run++) {
    const attempt = await client.begin({ runId: `${name}-${run}`, rule: "drain", checkpoint: "c" });
    for (let n = 0; n < 3; n++) {
      const written = await attempt.create("ticket", rawJson(JSON.stringify({ agent: name, run, n })));
      process.stdout.write(JSON.stringify({ id: written.id }) + "\n");
    }
    await attempt.end();
  }
} catch (error) {
  if (!(error instanceof ActonceError)) throw error;
  const failure = { code: status[error.code], reason: error.reason, failure_class: error.failureClass, message: error.message };
  process.stdout.write(JSON.stringify(failure) + "\n");
} finally {
  client.close();
}
