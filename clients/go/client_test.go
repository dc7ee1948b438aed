package actonce_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	actonce "github.com/actonce/actonce/clients/go"
	"github.com/actonce/actonce/clients/go/internal/sidecartest"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var sidecar *sidecartest.Sidecar

func TestMain(m *testing.M) {
	var err error
	sidecar, err = sidecartest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	sidecar.Stop()
	os.Exit(code)
}

func connect(t *testing.T) *actonce.Client {
	t.Helper()
	client, err := actonce.New(sidecar.Target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

func begin(t *testing.T, client *actonce.Client, run actonce.Run) *actonce.Attempt {
	t.Helper()
	attempt, err := client.Begin(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	return attempt
}

func newRun(rule string) actonce.Run {
	return actonce.Run{ID: "run-" + uuid.NewString(), Rule: rule, Checkpoint: "cp-1"}
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

type ticket struct {
	Title    string `json:"title"`
	Severity int    `json:"severity"`
	Status   string `json:"status,omitempty"`
}

// writeAll makes one run's writes; the retry test makes them again.
func writeAll(t *testing.T, ctx context.Context, a *actonce.Attempt) map[string]actonce.Write {
	t.Helper()
	write := must[actonce.Write](t)
	out := map[string]actonce.Write{}
	out["thread"] = write(a.CreateThread(ctx, "Incident 7"))
	out["ticket"] = write(a.Create(ctx, "ticket", ticket{Title: "Disk full", Severity: 2}))
	out["edit"] = write(a.Edit(ctx, out["ticket"].ID, "/status", "open"))
	out["notice"] = write(a.Notice(ctx, out["thread"].ID, "Filed "+out["ticket"].ID))
	out["send"] = write(a.Send(ctx, out["thread"].ID, "Please look at "+out["ticket"].ID))
	return out
}

func TestWritesApply(t *testing.T) {
	ctx := context.Background()
	client := connect(t)
	run := newRun(sidecartest.SendRule)
	a := begin(t, client, run)
	got := writeAll(t, ctx, a)
	for name, w := range got {
		if w.Outcome != actonce.OutcomeApplied {
			t.Errorf("%s: outcome %v, want APPLIED", name, w.Outcome)
		}
	}

	// The sidecar's ids are the ones the scheme derives.
	identity := must[[]string](t)(actonce.CreateIdentity("ticket", []byte(`{"severity":2,"title":"Disk full"}`)))
	want := must[string](t)(actonce.DeriveID(actonce.WriteCreate, run.ID, run.Checkpoint, identity, 0))
	if got["ticket"].ID != want {
		t.Errorf("ticket id %s, derived %s", got["ticket"].ID, want)
	}

	artifact := must[actonce.Artifact](t)(a.ReadArtifact(ctx, got["ticket"].ID))
	var data ticket
	if err := json.Unmarshal(artifact.Data, &data); err != nil {
		t.Fatal(err)
	}
	if data.Status != "open" || artifact.Version != got["edit"].Version || artifact.Kind != "ticket" {
		t.Errorf("artifact after edit: %+v (data %+v)", artifact, data)
	}
	messages := must[[]actonce.Message](t)(a.ReadThread(ctx, got["thread"].ID))
	if len(messages) != 2 || messages[0].Kind != "notice" || messages[1].Kind != "message" {
		t.Errorf("thread messages: %+v", messages)
	}

	step := must[actonce.Step](t)(a.BeginStep(ctx, "send_email", actonce.EffectIdempotentWrite, map[string]string{"to": "ops@example.com"}))
	if step.Done() {
		t.Fatalf("a new step is done: %+v", step)
	}
	if outcome := must[actonce.Outcome](t)(a.EndStep(ctx, step.ID, map[string]bool{"sent": true})); outcome != actonce.OutcomeApplied {
		t.Errorf("EndStep outcome %v", outcome)
	}
	lease := time.Now().Add(time.Hour).Truncate(time.Second)
	if moved := must[time.Time](t)(a.ExtendLease(ctx, lease)); !moved.Equal(lease) {
		t.Errorf("lease %v, want %v", moved, lease)
	}
	counts := must[actonce.Counts](t)(a.End(ctx))
	if counts != (actonce.Counts{Applied: 6}) {
		t.Errorf("counts %+v, want 6 applied (5 writes and the step, its end no other)", counts)
	}
}

func TestRetriedAttemptGetsSameIDsAlreadyApplied(t *testing.T) {
	ctx := context.Background()
	client := connect(t)
	run := newRun(sidecartest.SendRule)
	first := begin(t, client, run)
	before := writeAll(t, ctx, first)
	// The first attempt dies here: no End. The run is retried from the same checkpoint.
	retry := begin(t, client, run)
	after := writeAll(t, ctx, retry)
	for name, w := range after {
		if w.ID != before[name].ID {
			t.Errorf("%s: retry id %s, first %s", name, w.ID, before[name].ID)
		}
		want := actonce.OutcomeAlreadyApplied
		if name == "edit" {
			want = actonce.OutcomeSkipped // the value is already there
		}
		if w.Outcome != want {
			t.Errorf("%s: retry outcome %v, want %v", name, w.Outcome, want)
		}
	}
	messages := must[[]actonce.Message](t)(retry.ReadThread(ctx, after["thread"].ID))
	if len(messages) != 2 {
		t.Errorf("thread has %d messages after the retry, want each once: %+v", len(messages), messages)
	}
	counts := must[actonce.Counts](t)(retry.End(ctx))
	if counts != (actonce.Counts{AlreadyApplied: 4, Skipped: 1}) {
		t.Errorf("retry counts %+v", counts)
	}
}

func asError(t *testing.T, err error) *actonce.Error {
	t.Helper()
	var e *actonce.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *actonce.Error", err, err)
	}
	return e
}

func TestRefusalsAreTypedErrors(t *testing.T) {
	ctx := context.Background()
	client := connect(t)

	a := begin(t, client, newRun("not-a-sender"))
	_, err := a.Create(ctx, "ticket", json.RawMessage("{"))
	bad := asError(t, err)
	if bad.Code != codes.InvalidArgument || bad.Reason != "INVALID_ARGUMENT" || !bad.Refused() || bad.Retryable() {
		t.Errorf("invalid JSON: %+v", bad)
	}
	if len(bad.Violations) != 1 || bad.Violations[0].Field != "data_json" {
		t.Errorf("violations %+v, want one on data_json", bad.Violations)
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("status.Code(err) = %v", status.Code(err))
	}

	thread := must[actonce.Write](t)(a.CreateThread(ctx, "Refusals"))
	_, err = a.Send(ctx, thread.ID, "may I?")
	forbidden := asError(t, err)
	if forbidden.Reason != "FORBIDDEN" || forbidden.Class != actonce.Permanent || !forbidden.Permanent() {
		t.Errorf("send off the allowlist: %+v", forbidden)
	}

	must[actonce.Counts](t)(a.End(ctx))
	_, err = a.Notice(ctx, thread.ID, "after the end")
	gone := asError(t, err)
	if gone.Reason != "UNKNOWN_ATTEMPT" || !gone.Retryable() || gone.Code != codes.FailedPrecondition {
		t.Errorf("write to an ended attempt: %+v", gone)
	}
}

func TestRequestIDReplay(t *testing.T) {
	ctx := context.Background()
	client := connect(t)
	a := begin(t, client, newRun("replay"))
	data := map[string]string{"title": "once"}
	first := must[actonce.Write](t)(a.Create(ctx, "ticket", data, actonce.WithRequestID("req-1")))
	again := must[actonce.Write](t)(a.Create(ctx, "ticket", data, actonce.WithRequestID("req-1")))
	if again != first {
		t.Errorf("replay answered %+v, first %+v", again, first)
	}
	// Without the same request_id, the same data is a second, distinct write.
	second := must[actonce.Write](t)(a.Create(ctx, "ticket", data))
	if second.ID == first.ID || second.Outcome != actonce.OutcomeApplied {
		t.Errorf("second identical create: %+v, first %+v", second, first)
	}
	_, err := a.Create(ctx, "ticket", map[string]string{"title": "other"}, actonce.WithRequestID("req-1"))
	if e := asError(t, err); e.Reason != "INVALID_ARGUMENT" || e.Violations[0].Field != "request_id" {
		t.Errorf("request_id reused for another request: %+v", e)
	}
	counts := must[actonce.Counts](t)(a.End(ctx))
	if counts.Applied != 2 {
		t.Errorf("counts %+v: a replay must not count as a write", counts)
	}
}

func TestARequestIDsLimitIs512BytesInAnyText(t *testing.T) {
	ctx := context.Background()
	a := begin(t, connect(t), newRun("limits"))
	atTheLimit := strings.Repeat("é", 256) // 512 bytes of UTF-8, 256 characters
	taken := must[actonce.Write](t)(a.Create(ctx, "ticket", map[string]string{}, actonce.WithRequestID(atTheLimit)))
	if taken.Outcome != actonce.OutcomeApplied {
		t.Errorf("a request_id of 512 bytes: %+v", taken)
	}
	_, err := a.Create(ctx, "ticket", map[string]string{}, actonce.WithRequestID(atTheLimit+"a"))
	if e := asError(t, err); e.Reason != "INVALID_ARGUMENT" || e.Violations[0].Field != "request_id" {
		t.Errorf("a request_id of 513 bytes: %+v", e)
	}
}

func TestCallsHaveADeadline(t *testing.T) {
	client, err := actonce.New(sidecar.Target, actonce.WithTimeout(time.Nanosecond))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	_, err = client.Begin(context.Background(), newRun("deadline"))
	e := asError(t, err)
	if e.Code != codes.DeadlineExceeded || !e.Retryable() {
		t.Errorf("call with a 1ns timeout: %+v", e)
	}
}

func TestScopedAttemptsKeepTheirOwnIDsAndDoNotFenceEachOther(t *testing.T) {
	ctx := context.Background()
	client := connect(t)
	run := newRun("scopes")
	thread := must[actonce.Write](t)(begin(t, client, run).CreateThread(ctx, "Tool calls"))
	calls := []*actonce.Attempt{}
	for _, scope := range []string{"call_1", "call_2"} {
		scoped := run
		scoped.Scope = scope
		calls = append(calls, begin(t, client, scoped))
	}
	posted := []actonce.Write{}
	for _, a := range calls {
		w := must[actonce.Write](t)(a.Notice(ctx, thread.ID, "Charged."))
		identity := must[[]string](t)(actonce.PostIdentity(thread.ID, "Charged."))
		want := must[string](t)(a.IDScheme().DeriveID(actonce.WriteNotice, run.ID, run.Checkpoint, identity, 0))
		if w.Outcome != actonce.OutcomeApplied || w.ID != want || a.IDScheme().Version != actonce.SchemeVersion {
			t.Errorf("scope %s: %+v, want APPLIED %s (scheme %+v)", a.Run().Scope, w, want, a.IDScheme())
		}
		posted = append(posted, w)
	}
	if posted[0].ID == posted[1].ID {
		t.Errorf("the same write in two scopes got one id %s", posted[0].ID)
	}
	// A new attempt of call_1 fences the older one only.
	newer := run
	newer.Scope = "call_1"
	retry := begin(t, client, newer)
	if _, err := calls[0].Notice(ctx, thread.ID, "late"); asError(t, err).Reason != "ATTEMPT_FENCED" {
		t.Errorf("the older attempt of call_1 was not fenced: %v", err)
	}
	must[actonce.Write](t)(calls[1].Notice(ctx, thread.ID, "still on"))
	if again := must[actonce.Write](t)(retry.Notice(ctx, thread.ID, "Charged.")); again.ID != posted[0].ID {
		t.Errorf("retry of call_1 got %s, want %s", again.ID, posted[0].ID)
	}
}

func TestANewerDeliveryFencesTheToolCallsOfAnOlderOne(t *testing.T) {
	ctx := context.Background()
	client := connect(t)
	run := newRun("deliveries")
	run.Checkpoint = ""
	older := begin(t, client, run)
	thread := must[actonce.Write](t)(older.CreateThread(ctx, "Deliveries"))
	toolCall := run
	toolCall.Scope = "call_1"
	toolCall.DeliveryAttemptID = older.ID()
	scoped := begin(t, client, toolCall)
	must[actonce.Write](t)(scoped.Notice(ctx, thread.ID, "before the redelivery"))
	begin(t, client, run) // the queue delivers the job again
	// The older delivery's tool call is another scope than the newer delivery's, yet fenced.
	if _, err := scoped.Notice(ctx, thread.ID, "late"); asError(t, err).Reason != "ATTEMPT_FENCED" {
		t.Errorf("the older delivery's tool call was not fenced: %v", err)
	}
	unscoped := run
	unscoped.DeliveryAttemptID = older.ID()
	if _, err := client.Begin(ctx, unscoped); asError(t, err).Reason != "INVALID_ARGUMENT" {
		t.Errorf("an unscoped attempt named a delivery: %v", err)
	}
}

func TestAnAbortedStepRunsInALaterAttempt(t *testing.T) {
	ctx := context.Background()
	client := connect(t)
	run := newRun("steps")
	first := begin(t, client, run)
	step := must[actonce.Step](t)(first.BeginStep(ctx, "charge_card", actonce.EffectNonIdempotentWrite, map[string]int{"amount": 10}))
	if o := must[actonce.Outcome](t)(first.AbortStep(ctx, step.ID, "connection refused")); o != actonce.OutcomeApplied {
		t.Errorf("abort outcome %v", o)
	}
	if _, err := first.EndStep(ctx, step.ID, map[string]bool{"charged": true}); asError(t, err).Reason != "STEP_ABORTED" {
		t.Errorf("end after abort: %v", err)
	}
	retry := begin(t, client, run)
	again := must[actonce.Step](t)(retry.BeginStep(ctx, "charge_card", actonce.EffectNonIdempotentWrite, map[string]int{"amount": 10}))
	if again.ID != step.ID || again.Done() {
		t.Errorf("retry step %+v, want %s to run", again, step.ID)
	}
	must[actonce.Outcome](t)(retry.EndStep(ctx, again.ID, map[string]bool{"charged": true}))
	if _, err := retry.AbortStep(ctx, again.ID, "too late"); asError(t, err).Reason != "STEP_ENDED" {
		t.Errorf("abort after end: %v", err)
	}
}
