package actonce_test

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	actonce "github.com/actonce/actonce/clients/go"
	"github.com/actonce/actonce/clients/go/internal/sidecartest"
	"github.com/google/uuid"
)

// The deadline of the calls made through the holding proxy.
const timeoutPastWhichAnswersAreHeld = time.Second

// A proxy (clients/testkit/holding_proxy.py) passes a Create to the real
// sidecar, which makes the ticket, and holds the answer until the client gives
// up at its deadline. Repeating the write as the README shows, with the
// request_id taken from the error, gets the first answer back, and the store
// holds one ticket, not two.
func TestAWriteHeldPastItsDeadlineIsRepeatedAsTheReadmeShows(t *testing.T) {
	proxy, err := sidecartest.StartTestkit("holding_proxy.py", sidecar.Target)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Stop()
	client, err := actonce.New(proxy.Target, actonce.WithTimeout(timeoutPastWhichAnswersAreHeld))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	run := actonce.Run{ID: "run-" + uuid.NewString(), Rule: "triage", Checkpoint: "cp-1"}
	attempt, err := client.Begin(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string]any{"title": "Disk full", "severity": 2}
	if answer, err := proxy.Command("hold"); err != nil || answer != "held" {
		t.Fatalf("hold: %q, %v", answer, err)
	}
	// The README's safe repeat:
	ticket, err := attempt.Create(ctx, "ticket", data)
	var failed *actonce.Error
	if errors.As(err, &failed) && failed.Retryable() && failed.RequestID != "" {
		// The outcome is unknown: repeat the same write with the same request_id.
		ticket, err = attempt.Create(ctx, "ticket", data, actonce.WithRequestID(failed.RequestID))
	}
	// End of the README's safe repeat.
	if err != nil {
		t.Fatal(err)
	}
	if answer, _ := proxy.Command("given-up"); answer != "1" {
		t.Fatalf("the client gave up on %s calls, want 1: the first try was answered in time", answer)
	}

	identity, err := actonce.CreateIdentity("ticket", []byte(`{"title":"Disk full","severity":2}`))
	if err != nil {
		t.Fatal(err)
	}
	first := must[string](t)(actonce.DeriveID(actonce.WriteCreate, run.ID, run.Checkpoint, identity, 0))
	second := must[string](t)(actonce.DeriveID(actonce.WriteCreate, run.ID, run.Checkpoint, identity, 1))
	if ticket.ID != first || ticket.Outcome != actonce.OutcomeApplied {
		t.Errorf("the repeat answered %s %s, want the first answer %s APPLIED", ticket.ID, ticket.Outcome, first)
	}
	if _, err := attempt.ReadArtifact(ctx, first); err != nil {
		t.Errorf("the ticket is not in the store: %v", err)
	}
	var missing *actonce.Error
	if _, err := attempt.ReadArtifact(ctx, second); !errors.As(err, &missing) || missing.Reason != "NOT_FOUND" {
		t.Errorf("a second ticket: %v", err)
	}
	counts, err := attempt.End(ctx)
	if err != nil || counts.Applied != 1 {
		t.Errorf("counts %+v, %v: want one write applied", counts, err)
	}
}

// The README shows the repeat the test above makes.
func TestTheReadmeShowsTheRepeat(t *testing.T) {
	source, err := os.ReadFile("repeat_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	example := regexp.MustCompile(`(?s)// The README's safe repeat:\n(.*?)\n\s*// End of`).FindSubmatch(source)
	if example == nil || !strings.Contains(lines(string(readme)), lines(string(example[1]))) {
		t.Fatal("README.md does not show the repeat this test makes")
	}
}

func lines(text string) string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		out = append(out, strings.TrimSpace(line))
	}
	return strings.Join(out, "\n")
}
