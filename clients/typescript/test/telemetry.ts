/**
 * OpenTelemetry for an agent, exactly as the README shows it (a test holds the
 * two equal): loaded before the agent's own code, `node --import
 * ./telemetry.js agent.js`, so that the gRPC instrumentation hooks
 * @grpc/grpc-js, which the client uses, as it loads.
 */
import { register } from "node:module";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-grpc";
import { registerInstrumentations } from "@opentelemetry/instrumentation";
import { GrpcInstrumentation } from "@opentelemetry/instrumentation-grpc";
import { detectResources, envDetector } from "@opentelemetry/resources";
import { BatchSpanProcessor, NodeTracerProvider } from "@opentelemetry/sdk-trace-node";

// Lets instrumentations patch ES modules, and the CommonJS ones they import.
register("@opentelemetry/instrumentation/hook.mjs", import.meta.url);

export const provider = new NodeTracerProvider({
  resource: detectResources({ detectors: [envDetector] }), // OTEL_SERVICE_NAME
  spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
});
provider.register();
registerInstrumentations({ instrumentations: [new GrpcInstrumentation()] });
