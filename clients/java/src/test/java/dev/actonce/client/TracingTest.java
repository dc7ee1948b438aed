package dev.actonce.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import dev.actonce.v1.BeginAttemptRequest;
import dev.actonce.v1.BeginAttemptResponse;
import dev.actonce.v1.RunActionsServiceGrpc;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.StreamObserver;
import io.opentelemetry.api.OpenTelemetry;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.propagation.W3CTraceContextPropagator;
import io.opentelemetry.context.Scope;
import io.opentelemetry.context.propagation.ContextPropagators;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.testing.exporter.InMemorySpanExporter;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import io.opentelemetry.sdk.trace.data.SpanData;
import io.opentelemetry.sdk.trace.export.SimpleSpanProcessor;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** A client given the agent's OpenTelemetry continues the agent's trace into the sidecar. */
class TracingTest {
  private static final Metadata.Key<String> TRACEPARENT =
      Metadata.Key.of("traceparent", Metadata.ASCII_STRING_MARSHALLER);

  /** Answers BeginAttempt and records the traceparent each call arrived with ("" for none). */
  private static final class Headers extends RunActionsServiceGrpc.RunActionsServiceImplBase
      implements ServerInterceptor {
    final List<String> traceparents = new CopyOnWriteArrayList<>();

    @Override
    public <Q, A> ServerCall.Listener<Q> interceptCall(
        ServerCall<Q, A> call, Metadata headers, ServerCallHandler<Q, A> next) {
      String traceparent = headers.get(TRACEPARENT);
      traceparents.add(traceparent == null ? "" : traceparent);
      return next.startCall(call, headers);
    }

    @Override
    public void beginAttempt(
        BeginAttemptRequest request, StreamObserver<BeginAttemptResponse> response) {
      response.onNext(BeginAttemptResponse.newBuilder().setAttemptId("att_1").build());
      response.onCompleted();
    }
  }

  private Headers headers;
  private Server server;
  private String target;

  @BeforeEach
  void serve() throws Exception {
    headers = new Headers();
    server =
        NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0))
            .addService(ServerInterceptors.intercept(headers, headers))
            .build()
            .start();
    target = "127.0.0.1:" + server.getPort();
  }

  @AfterEach
  void stop() {
    server.shutdownNow();
  }

  @Test
  void theAgentsSpanIsTheParentOfTheCallAndTheSidecarReceivesIt() {
    InMemorySpanExporter spans = InMemorySpanExporter.create();
    OpenTelemetrySdk sdk =
        OpenTelemetrySdk.builder()
            .setTracerProvider(
                SdkTracerProvider.builder()
                    .addSpanProcessor(SimpleSpanProcessor.create(spans))
                    .build())
            .setPropagators(ContextPropagators.create(W3CTraceContextPropagator.getInstance()))
            .build();
    Span agent = sdk.getTracer("agent").spanBuilder("triage").startSpan();
    try (ActonceClient client = ActonceClient.connect(target, Duration.ofSeconds(30), sdk);
        Scope ignored = agent.makeCurrent()) {
      client.begin(Run.of("run-1", "rule", ""));
    } finally {
      agent.end();
    }
    // Read before the SDK closes: closing it empties the in-memory exporter.
    List<SpanData> finished = spans.getFinishedSpanItems();
    sdk.close();

    SpanData call = null;
    for (SpanData span : finished) {
      if (span.getName().equals("actonce.v1.RunActionsService/BeginAttempt")) {
        call = span;
      }
    }
    assertNotNull(call, "no client span among " + finished);
    assertEquals(SpanKind.CLIENT, call.getKind());
    assertEquals(agent.getSpanContext().getTraceId(), call.getTraceId());
    assertEquals(agent.getSpanContext().getSpanId(), call.getParentSpanId());
    // The trace flags say sampled (the SDK may also set W3C's random-trace-id flag).
    assertEquals(1, headers.traceparents.size());
    String[] traceparent = headers.traceparents.get(0).split("-");
    assertEquals(List.of("00", call.getTraceId(), call.getSpanId()), List.of(traceparent).subList(0, 3));
    assertEquals(1, Integer.parseInt(traceparent[3], 16) & 1, headers.traceparents.get(0));
  }

  @Test
  void withoutAnSdkNoTraceContextIsSent() {
    try (ActonceClient plain = ActonceClient.connect(target, Duration.ofSeconds(30));
        ActonceClient apiOnly =
            ActonceClient.connect(target, Duration.ofSeconds(30), OpenTelemetry.noop())) {
      plain.begin(Run.of("run-1", "rule", ""));
      apiOnly.begin(Run.of("run-2", "rule", ""));
    }
    assertEquals(List.of("", ""), new ArrayList<>(headers.traceparents));
  }
}
