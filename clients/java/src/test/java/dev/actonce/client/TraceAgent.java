package dev.actonce.client;

import com.google.gson.Gson;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.context.Scope;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.autoconfigure.AutoConfiguredOpenTelemetrySdk;
import java.time.Duration;
import java.util.Map;

/**
 * The Java agent of the tracing test (clients/crosslang): with OpenTelemetry's SDK set up from
 * the standard OTEL_* variables, it begins an attempt of run RUN, makes one create inside a span
 * of its own, ends the attempt, and prints that span's trace and span id and the write's id as
 * one JSON line.
 *
 * <pre>java -cp ... dev.actonce.client.TraceAgent TARGET RUN</pre>
 */
public final class TraceAgent {
  private TraceAgent() {}

  public static void main(String[] args) {
    if (args.length != 2) {
      throw new IllegalArgumentException("usage: TraceAgent TARGET RUN");
    }
    OpenTelemetrySdk sdk = AutoConfiguredOpenTelemetrySdk.initialize().getOpenTelemetrySdk();
    Span span;
    Write written;
    try (ActonceClient client = ActonceClient.connect(args[0], Duration.ofSeconds(10), sdk)) {
      Attempt attempt = client.begin(Run.of(args[1], "traced", "c"));
      span = sdk.getTracer("trace-agent").spanBuilder("file ticket").startSpan();
      try (Scope ignored = span.makeCurrent()) {
        written = attempt.create("ticket", "{\"title\":\"Disk full\",\"agent\":\"java\"}");
      } finally {
        span.end();
      }
      attempt.end();
    }
    sdk.close();
    System.out.println(
        new Gson()
            .toJson(
                Map.of(
                    "trace_id", span.getSpanContext().getTraceId(),
                    "span_id", span.getSpanContext().getSpanId(),
                    "id", written.id())));
  }
}
