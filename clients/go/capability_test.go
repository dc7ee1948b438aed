package actonce_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	actonce "github.com/actonce/actonce/clients/go"
	"github.com/actonce/actonce/clients/go/internal/sidecartest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// A harness holds the API token and begins attempts; the agent process it
// starts holds only its attempt's id and capability, on a client with no
// token. With --agent-capabilities, that agent makes its own attempt's calls
// and begins its delivery's tool calls, and cannot begin, fence or read
// another run.
func TestAnAgentGivenOnlyItsCapabilityReachesOnlyItsAttempt(t *testing.T) {
	t.Setenv(actonce.APITokenFileEnv, "")
	t.Setenv(actonce.APITokenEnv, "")
	path := filepath.Join(t.TempDir(), "api.token")
	writeToken(t, path, apiToken)
	guarded, err := sidecartest.Start("--api-token-file", path, "--agent-capabilities", "true")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(guarded.Stop)
	ctx := context.Background()

	harness := must[*actonce.Client](t)(actonce.New(guarded.Target, actonce.WithAPIToken(apiToken)))
	t.Cleanup(func() { harness.Close() })
	mine := begin(t, harness, newRun(sidecartest.SendRule))
	other := newRun(sidecartest.SendRule)
	theirs := begin(t, harness, other)
	theirTicket := must[actonce.Write](t)(theirs.Create(ctx, "ticket", map[string]string{"title": "theirs"}))
	if mine.Capability() == "" || mine.Capability() == theirs.Capability() {
		t.Fatalf("capabilities %q and %q: each attempt has its own", mine.Capability(), theirs.Capability())
	}

	agent := must[*actonce.Client](t)(actonce.New(guarded.Target)) // no token
	t.Cleanup(func() { agent.Close() })
	own := agent.Attempt(actonce.Handle{ID: mine.ID(), Capability: mine.Capability()})
	ticket := must[actonce.Write](t)(own.Create(ctx, "ticket", map[string]string{"title": "mine"}))
	thread := must[actonce.Write](t)(own.CreateThread(ctx, "Mine"))
	must[actonce.Write](t)(own.Notice(ctx, thread.ID, "filed "+ticket.ID))
	if read := must[actonce.Artifact](t)(own.ReadArtifact(ctx, ticket.ID)); read.ID != ticket.ID {
		t.Errorf("read own ticket: %+v", read)
	}
	step := must[actonce.Step](t)(own.BeginStep(ctx, "page", actonce.EffectIdempotentWrite, map[string]string{"who": "ops"}))
	must[actonce.Outcome](t)(own.EndStep(ctx, step.ID, map[string]bool{"paged": true}))
	toolCall := must[*actonce.Attempt](t)(own.BeginScoped(ctx, actonce.Run{ID: mine.Run().ID, Rule: mine.Run().Rule, Scope: "call_1"}))
	if toolCall.Capability() == "" || toolCall.Capability() == own.Capability() {
		t.Errorf("a tool call's attempt has its own capability, got %q", toolCall.Capability())
	}
	must[actonce.Write](t)(toolCall.Notice(ctx, thread.ID, "from the tool call"))

	// Another run: neither begun, nor fenced, nor read.
	if _, err := agent.Begin(ctx, other); !isUnauthenticated(err) {
		t.Errorf("BeginAttempt with no token: %v, want UNAUTHENTICATED", err)
	}
	withMine := metadata.AppendToOutgoingContext(ctx, actonce.CapabilityMetadata, mine.Capability())
	for _, run := range []actonce.Run{other, mine.Run()} {
		if _, err := agent.Begin(withMine, run); !isCapabilityRefused(err) {
			t.Errorf("BeginAttempt of run %s with the agent's capability: %v, want CAPABILITY_REFUSED", run.ID, err)
		}
	}
	stolen := agent.Attempt(actonce.Handle{ID: theirs.ID(), Capability: mine.Capability()})
	if _, err := stolen.ReadArtifact(ctx, theirTicket.ID); !isCapabilityRefused(err) {
		t.Errorf("read through another attempt: %v, want CAPABILITY_REFUSED", err)
	}
	if _, err := stolen.Create(ctx, "ticket", map[string]string{"title": "planted"}); !isCapabilityRefused(err) {
		t.Errorf("write through another attempt: %v, want CAPABILITY_REFUSED", err)
	}
	forged := agent.Attempt(actonce.Handle{ID: theirs.ID(), Capability: "acap1." + theirs.ID() + ".forged"})
	if _, err := forged.End(ctx); !isCapabilityRefused(err) {
		t.Errorf("end with a forged capability: %v, want CAPABILITY_REFUSED", err)
	}

	// The other run's attempt goes on, unfenced, with its one write; the agent's wrote its own.
	if _, err := theirs.CreateThread(ctx, "Theirs"); err != nil {
		t.Errorf("the other run's attempt after the agent's tries: %v", err)
	}
	if counts := must[actonce.Counts](t)(theirs.End(ctx)); counts.Applied != 2 {
		t.Errorf("the other run's counts %+v, want its own 2 writes", counts)
	}
	must[actonce.Counts](t)(own.End(ctx))
}

// A sidecar without --agent-capabilities issues none, and the calls carry none.
func TestASidecarWithoutAgentCapabilitiesIssuesNone(t *testing.T) {
	a := begin(t, connect(t), newRun("capabilities"))
	if a.Capability() != "" || a.Handle().Capability != "" {
		t.Errorf("capability %q from a sidecar that issues none", a.Capability())
	}
	handle := a.Handle()
	if handle.ID != a.ID() || handle.Run != a.Run() || handle.IDSchemeVersion != a.IDScheme().Version {
		t.Errorf("handle %+v of attempt %s", handle, a.ID())
	}
}

func isCapabilityRefused(err error) bool {
	var e *actonce.Error
	return errors.As(err, &e) && e.Code == codes.PermissionDenied &&
		e.Reason == "CAPABILITY_REFUSED" && e.Class == actonce.Permanent
}
