// Command traceagent is the Go agent of the tracing test (clients/crosslang):
// with OpenTelemetry's SDK exporting over OTLP as the standard OTEL_*
// variables say, it begins an attempt of run RUN, makes one create inside a
// span of its own, ends the attempt, and prints that span's trace and span id
// and the write's id as one JSON line.
//
//	traceagent TARGET RUN
package main

import (
	"context"
	"encoding/json"
	"log"
	"os"

	actonce "github.com/actonce/actonce/clients/go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func main() {
	if len(os.Args) != 3 {
		log.Fatal("usage: traceagent TARGET RUN")
	}
	ctx := context.Background()
	exporter, err := otlptracegrpc.New(ctx)
	if err != nil {
		log.Fatal(err)
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter))
	otel.SetTracerProvider(provider)
	otel.SetTextMapPropagator(propagation.TraceContext{})

	client, err := actonce.New(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	attempt, err := client.Begin(ctx, actonce.Run{ID: os.Args[2], Rule: "traced", Checkpoint: "c"})
	if err != nil {
		log.Fatal(err)
	}
	spanCtx, span := provider.Tracer("traceagent").Start(ctx, "file ticket")
	written, err := attempt.Create(spanCtx, "ticket", map[string]any{"title": "Disk full", "agent": "go"})
	span.End()
	if err != nil {
		log.Fatal(err)
	}
	if _, err := attempt.End(ctx); err != nil {
		log.Fatal(err)
	}
	client.Close()
	if err := provider.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	line := map[string]string{
		"trace_id": span.SpanContext().TraceID().String(),
		"span_id":  span.SpanContext().SpanID().String(),
		"id":       written.ID,
	}
	if err := json.NewEncoder(os.Stdout).Encode(line); err != nil {
		log.Fatal(err)
	}
}
