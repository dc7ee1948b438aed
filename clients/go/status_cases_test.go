package actonce_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	actonce "github.com/actonce/actonce/clients/go"
	"github.com/actonce/actonce/clients/go/internal/sidecartest"
	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"
)

type statusCase struct {
	Name   string `json:"name"`
	Expect struct {
		Outcome string `json:"outcome"`
		Error   *struct {
			Code         string   `json:"code"`
			Reason       string   `json:"reason"`
			FailureClass string   `json:"failure_class"`
			Violations   []string `json:"violations"`
		} `json:"error"`
	} `json:"expect"`
}

// Every case of docs/status-cases.json, answered for real by the stand-in
// sidecar (clients/testkit/status_sidecar.py, raw trailers included), gives
// its typed result; the other three clients read the same file.
func TestStatusCases(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "status-cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []statusCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &file); err != nil || len(file.Cases) == 0 {
		t.Fatalf("no status cases: %v", err)
	}
	fake, err := sidecartest.StartTestkit("status_sidecar.py")
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Stop()
	client, err := actonce.New(fake.Target)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	attempt, err := client.Begin(ctx, actonce.Run{ID: "run-status-cases", Rule: "rule"})
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]actonce.Outcome{
		"APPLIED": actonce.OutcomeApplied, "ALREADY_APPLIED": actonce.OutcomeAlreadyApplied,
		"SKIPPED": actonce.OutcomeSkipped, "UNRECOGNIZED": actonce.OutcomeUnrecognized,
	}
	for _, c := range file.Cases {
		t.Run(c.Name, func(t *testing.T) {
			requestID := actonce.NewRequestID()
			written, err := attempt.Create(ctx, c.Name, map[string]any{}, actonce.WithRequestID(requestID))
			if c.Expect.Error == nil {
				want, known := outcomes[c.Expect.Outcome]
				if err != nil || !known || written.Outcome != want {
					t.Fatalf("got %v, %v; want outcome %s", written.Outcome, err, c.Expect.Outcome)
				}
				return
			}
			want := c.Expect.Error
			var e *actonce.Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v (%T), want an *actonce.Error", err, err)
			}
			if got := code.Code_name[int32(e.Code)]; got != want.Code {
				t.Errorf("code %s, want %s", got, want.Code)
			}
			if e.Reason != want.Reason || string(e.Class) != want.FailureClass {
				t.Errorf("got %s %s, want %s %s", e.Reason, e.Class, want.Reason, want.FailureClass)
			}
			var fields []string
			for _, v := range e.Violations {
				fields = append(fields, v.Field)
			}
			if !slices.Equal(fields, want.Violations) && len(fields)+len(want.Violations) > 0 {
				t.Errorf("violations %v, want %v", fields, want.Violations)
			}
			if e.RequestID != requestID {
				t.Errorf("request_id %q, want %q", e.RequestID, requestID)
			}
		})
	}
}

// A CANCELLED the caller caused itself, by cancelling its context, says
// nothing of the sidecar: it is Unknown, not the Retryable of a bare
// CANCELLED that reached the caller without its doing.
func TestACancellationOfTheCallersOwnIsNotRetryable(t *testing.T) {
	client := connect(t)
	attempt, err := client.Begin(context.Background(), actonce.Run{ID: "run-" + uuid.NewString(), Rule: "triage"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = attempt.Create(ctx, "ticket", map[string]any{"title": "Disk full"})
	var e *actonce.Error
	if !errors.As(err, &e) || e.Code != codes.Canceled || e.Reason != "CANCELLED" || !e.Unknown() {
		t.Fatalf("got %v, want CANCELLED, class UNKNOWN", err)
	}
}
