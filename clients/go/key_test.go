package actonce_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	actonce "github.com/actonce/actonce/clients/go"
	"google.golang.org/grpc/codes"
)

type order struct {
	Number int    `json:"number"`
	SeenAt string `json:"seen_at"`
}

// A delivery's data holds the time it was made, so each redelivery's data
// differs. Named by a key, the create is one write all the same: the first
// delivery makes it and a redelivery finds it, whatever time it writes; the
// store keeps the first data. Within one attempt, the same key with other data
// names two writes by one key: refused KEY_REUSED, naming the id the key holds.
func TestAKeyedCreateLandsOnceAcrossRedeliveries(t *testing.T) {
	ctx := context.Background()
	client := connect(t)
	run := newRun("keys")
	first := begin(t, client, run)
	if first.IDScheme().Version != 3 {
		t.Fatalf("a new run derives under scheme %d; keys need 3", first.IDScheme().Version)
	}
	made := order{Number: 1234, SeenAt: "2026-12-06T05:40:00Z"}
	created := must[actonce.Write](t)(first.Create(ctx, "order", made, actonce.WithKey("order-1234")))
	identity := must[[]string](t)(actonce.KeyedCreateIdentity("order", "order-1234"))
	want := must[string](t)(first.IDScheme().DeriveKeyedID(actonce.WriteCreate, run.ID, run.Checkpoint, identity))
	if created.Outcome != actonce.OutcomeApplied || created.ID != want {
		t.Fatalf("keyed create: %+v, want APPLIED %s", created, want)
	}
	if again := must[actonce.Write](t)(first.Create(ctx, "order", made, actonce.WithKey("order-1234"))); again.ID != created.ID || again.Outcome != actonce.OutcomeAlreadyApplied {
		t.Errorf("the same data under its key in the same attempt: %+v, want ALREADY_APPLIED %s", again, created.ID)
	}
	_, err := first.Create(ctx, "order", order{Number: 5678, SeenAt: made.SeenAt}, actonce.WithKey("order-1234"))
	reused := asError(t, err)
	if reused.Reason != "KEY_REUSED" || !reused.Refused() || reused.Code != codes.AlreadyExists {
		t.Fatalf("the key with other data in one attempt: %+v, want KEY_REUSED, REFUSED", reused)
	}
	if reused.Metadata["id"] != created.ID {
		t.Errorf("KEY_REUSED names %q, want the id the key holds, %s", reused.Metadata["id"], created.ID)
	}

	// The queue delivers the job again: a new attempt of the run from the same
	// checkpoint, whose data holds a later time.
	redelivery := begin(t, client, run)
	later := order{Number: 1234, SeenAt: "2026-12-06T05:41:00Z"}
	found := must[actonce.Write](t)(redelivery.Create(ctx, "order", later, actonce.WithKey("order-1234")))
	if found.ID != created.ID || found.Outcome != actonce.OutcomeAlreadyApplied {
		t.Errorf("a redelivery under the key: %+v, want ALREADY_APPLIED %s", found, created.ID)
	}
	stored := must[actonce.Artifact](t)(redelivery.ReadArtifact(ctx, created.ID))
	var got order
	if err := json.Unmarshal(stored.Data, &got); err != nil {
		t.Fatal(err)
	}
	if got != made || stored.Version != 1 {
		t.Errorf("the store holds %+v at version %d, want the first delivery's %+v at 1", got, stored.Version, made)
	}
	if counts := must[actonce.Counts](t)(redelivery.End(ctx)); counts.Applied != 0 || counts.AlreadyApplied != 1 {
		t.Errorf("redelivery counts %+v: nothing made, one found", counts)
	}
}

// A thread and a step are named by a key too: a redelivery with another
// title or other arguments finds them; in one attempt, those are refused.
func TestKeyedThreadsAndStepsAreOneWriteEach(t *testing.T) {
	ctx := context.Background()
	client := connect(t)
	run := newRun("keys")
	first := begin(t, client, run)
	thread := must[actonce.Write](t)(first.CreateThread(ctx, "Order 1234 at 05:40", actonce.WithKey("order-1234")))
	if _, err := first.CreateThread(ctx, "Order 5678", actonce.WithKey("order-1234")); asError(t, err).Reason != "KEY_REUSED" {
		t.Errorf("the thread's key with another title in one attempt: %v", err)
	}
	step := must[actonce.Step](t)(first.BeginStep(ctx, "send_email", actonce.EffectNonIdempotentWrite,
		map[string]string{"to": "ops@example.com", "at": "05:40"}, actonce.WithKey("order-1234/mail")))
	must[actonce.Outcome](t)(first.EndStep(ctx, step.ID, map[string]bool{"sent": true}))
	_, err := first.BeginStep(ctx, "send_email", actonce.EffectNonIdempotentWrite,
		map[string]string{"to": "cfo@example.com"}, actonce.WithKey("order-1234/mail"))
	if e := asError(t, err); e.Reason != "KEY_REUSED" || !e.Refused() {
		t.Errorf("the step's key with other arguments in one attempt: %+v", e)
	}

	redelivery := begin(t, client, run)
	foundThread := must[actonce.Write](t)(redelivery.CreateThread(ctx, "Order 1234 at 05:41", actonce.WithKey("order-1234")))
	if foundThread.ID != thread.ID || foundThread.Outcome != actonce.OutcomeAlreadyApplied {
		t.Errorf("keyed thread redelivered: %+v, want ALREADY_APPLIED %s", foundThread, thread.ID)
	}
	foundStep := must[actonce.Step](t)(redelivery.BeginStep(ctx, "send_email", actonce.EffectNonIdempotentWrite,
		map[string]string{"to": "ops@example.com", "at": "05:41"}, actonce.WithKey("order-1234/mail")))
	if foundStep.ID != step.ID || !foundStep.Done() || string(foundStep.Result) != `{"sent":true}` {
		t.Errorf("keyed step redelivered: %+v, want done %s with its result", foundStep, step.ID)
	}
}

func TestAKeyIsRefusedWhereAWriteTakesNone(t *testing.T) {
	ctx := context.Background()
	a := begin(t, connect(t), newRun("keys"))
	if _, err := a.Notice(ctx, "thr_x", "hello", actonce.WithKey("k")); err == nil || errors.As(err, new(*actonce.Error)) {
		t.Errorf("a keyed notice: %v, want the client's refusal before any call", err)
	}
	_, err := a.Create(ctx, "order", map[string]int{"n": 1}, actonce.WithKey(strings.Repeat("k", 256)))
	if e := asError(t, err); e.Reason != "INVALID_ARGUMENT" || len(e.Violations) != 1 || e.Violations[0].Field != "key" {
		t.Errorf("a key of 256 bytes: %+v", e)
	}
}
