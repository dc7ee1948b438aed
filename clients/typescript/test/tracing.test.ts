/**
 * With OpenTelemetry's gRPC instrumentation registered as the README shows,
 * each call is a client span under the agent's own span, and the sidecar
 * receives its W3C trace context.
 *
 * The instrumentation must hook @grpc/grpc-js before it loads, so this file
 * imports neither it nor the client statically. The server here records the
 * headers each call arrives with: it stands in for the transport, not for the
 * sidecar, whose own spans the cross-language tracing test checks.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { register } from "node:module";
import { join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { SpanKind, trace } from "@opentelemetry/api";
import { registerInstrumentations } from "@opentelemetry/instrumentation";
import { GrpcInstrumentation } from "@opentelemetry/instrumentation-grpc";
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";

// The tests run from build/test.
const PACKAGE_DIR = resolve(fileURLToPath(import.meta.url), "..", "..", "..");

register("@opentelemetry/instrumentation/hook.mjs", import.meta.url);
const spans = new InMemorySpanExporter();
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
provider.register();
registerInstrumentations({ instrumentations: [new GrpcInstrumentation()] });

const grpc = await import("@grpc/grpc-js");
const { Client } = await import("../src/index.js");
const { RunActionsServiceService } = await import("../src/gen/actonce/v1/run_actions.js");

type Call = { metadata: { get(key: string): unknown[] } };

test("the agent's span is the parent of the call, and the sidecar receives it", async () => {
  const traceparents: unknown[][] = [];
  const server = new grpc.Server();
  server.addService(RunActionsServiceService, {
    beginAttempt: (call: Call, done: (e: null, r: object) => void) => {
      traceparents.push(call.metadata.get("traceparent"));
      done(null, { attemptId: "att_1", idSchemeVersion: 1 });
    },
  });
  const port = await new Promise<number>((resolvePort, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (error, bound) =>
      error ? reject(error) : resolvePort(bound),
    ),
  );
  const client = new Client(`127.0.0.1:${port}`);
  try {
    const agent = await trace.getTracer("agent").startActiveSpan("triage", async (span) => {
      await client.begin({ runId: "run-1", rule: "rule" });
      span.end();
      return span.spanContext();
    });

    const calls = spans
      .getFinishedSpans()
      .filter((s) => s.kind === SpanKind.CLIENT && s.name.endsWith("RunActionsService/BeginAttempt"));
    assert.equal(calls.length, 1, `client spans: ${spans.getFinishedSpans().map((s) => s.name)}`);
    const call = calls[0]!;
    assert.equal(call.spanContext().traceId, agent.traceId);
    assert.equal(call.parentSpanContext?.spanId, agent.spanId);
    assert.equal(traceparents.length, 1);
    const [version, traceId, parentId, flags] = String(traceparents[0]![0]).split("-");
    assert.deepEqual([version, traceId, parentId], ["00", agent.traceId, call.spanContext().spanId]);
    assert.equal(Number.parseInt(flags ?? "0", 16) & 1, 1, "sampled");
  } finally {
    client.close();
    server.forceShutdown();
    await provider.shutdown();
  }
});

test("test/telemetry.ts is the README's setup, word for word", () => {
  const readme = readFileSync(join(PACKAGE_DIR, "README.md"), "utf8");
  const block = /```ts\n(import \{ register \} from "node:module";\n[\s\S]*?)```/.exec(readme)?.[1];
  assert.ok(block, "README.md shows no tracing setup");
  const telemetry = readFileSync(join(PACKAGE_DIR, "test", "telemetry.ts"), "utf8");
  assert.ok(telemetry.endsWith(block), "test/telemetry.ts differs from the README's setup");
});
