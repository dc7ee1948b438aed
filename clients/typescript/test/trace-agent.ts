/**
 * The TypeScript agent of the tracing test (clients/crosslang), started with
 * telemetry.js loaded first: it begins an attempt of run RUN, makes one create
 * inside a span of its own, ends the attempt, and prints that span's trace and
 * span id and the write's id as one JSON line.
 *
 *   node --import ./build/test/telemetry.js build/test/trace-agent.js TARGET RUN
 */
import { trace } from "@opentelemetry/api";

import { Client } from "../src/index.js";
import { provider } from "./telemetry.js";

const [target, runId] = process.argv.slice(2);
if (!target || !runId) throw new Error("usage: trace-agent TARGET RUN");

const client = new Client(target);
const attempt = await client.begin({ runId, rule: "traced", checkpoint: "c" });
const [written, span] = await trace.getTracer("trace-agent").startActiveSpan("file ticket", async (span) => {
  try {
    return [await attempt.create("ticket", { title: "Disk full", agent: "typescript" }), span] as const;
  } finally {
    span.end();
  }
});
await attempt.end();
client.close();
await provider.shutdown();
const { traceId, spanId } = span.spanContext();
process.stdout.write(JSON.stringify({ trace_id: traceId, span_id: spanId, id: written.id }) + "\n");
