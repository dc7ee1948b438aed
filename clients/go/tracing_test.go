package actonce_test

import (
	"context"
	"net"
	"sync"
	"testing"

	actonce "github.com/actonce/actonce/clients/go"
	actoncev1 "github.com/actonce/actonce/clients/go/gen/actonce/v1"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// headerServer records the W3C trace context headers each BeginAttempt arrives with.
type headerServer struct {
	actoncev1.UnimplementedRunActionsServiceServer
	mu          sync.Mutex
	traceparent []string
}

func (s *headerServer) BeginAttempt(ctx context.Context, _ *actoncev1.BeginAttemptRequest) (*actoncev1.BeginAttemptResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.traceparent = append(s.traceparent, md.Get("traceparent")...)
	return &actoncev1.BeginAttemptResponse{AttemptId: "att_1"}, nil
}

func (s *headerServer) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.traceparent...)
}

func serveHeaders(t *testing.T) (*headerServer, string) {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	headers := &headerServer{}
	actoncev1.RegisterRunActionsServiceServer(server, headers)
	go server.Serve(listener)
	t.Cleanup(server.Stop)
	return headers, listener.Addr().String()
}

func beginIn(t *testing.T, ctx context.Context, target string) {
	t.Helper()
	client, err := actonce.New(target)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := client.Begin(ctx, actonce.Run{ID: "run-1", Rule: "r"}); err != nil {
		t.Fatal(err)
	}
}

func TestTheAgentsTraceGoesOnInTheSidecar(t *testing.T) {
	headers, target := serveHeaders(t)
	restoreProvider, restorePropagator := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		otel.SetTracerProvider(restoreProvider)
		otel.SetTextMapPropagator(restorePropagator)
	})

	// An agent with OpenTelemetry's API alone: no span, no header.
	otel.SetTracerProvider(noop.NewTracerProvider())
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	beginIn(t, context.Background(), target)
	if got := headers.received(); len(got) != 0 {
		t.Fatalf("traceparent sent with no SDK set up: %q", got)
	}

	// An agent with the SDK: the call is a client span under the agent's own span,
	// and the sidecar receives that span as the parent of its own.
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	otel.SetTracerProvider(provider)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	ctx, agentSpan := provider.Tracer("agent").Start(context.Background(), "triage")
	beginIn(t, ctx, target)
	agentSpan.End()

	var call sdktrace.ReadOnlySpan
	for _, span := range recorder.Ended() {
		if span.Name() == "actonce.v1.RunActionsService/BeginAttempt" {
			call = span
		}
	}
	if call == nil {
		t.Fatalf("no client span among %d spans", len(recorder.Ended()))
	}
	if call.SpanKind() != trace.SpanKindClient {
		t.Errorf("span kind %v, want client", call.SpanKind())
	}
	agent := agentSpan.SpanContext()
	if call.Parent().SpanID() != agent.SpanID() || call.SpanContext().TraceID() != agent.TraceID() {
		t.Errorf("client span %v has parent %v, want a child of the agent's span %v",
			call.SpanContext(), call.Parent(), agent)
	}
	want := "00-" + agent.TraceID().String() + "-" + call.SpanContext().SpanID().String() + "-01"
	if got := headers.received(); len(got) != 1 || got[0] != want {
		t.Errorf("traceparent received %q, want [%q]", got, want)
	}
}
