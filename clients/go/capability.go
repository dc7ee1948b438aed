package actonce

import (
	"context"

	"google.golang.org/grpc/metadata"
)

// CapabilityMetadata is the call metadata that carries an attempt's
// capability. Every call naming an attempt sends it when the attempt has one;
// a sidecar started with --agent-capabilities then takes the call from a
// process that holds no API token, for that attempt only.
const CapabilityMetadata = "actonce-attempt-capability"

// Handle is what a harness, which holds the API token and begins attempts,
// hands an agent process so that it makes one attempt's calls and no other's:
// the harness gives Attempt.Handle(), the agent builds its Attempt from it
// with Client.Attempt, on a client with no token.
type Handle struct {
	// ID is the attempt's id (Attempt.ID).
	ID string
	// Capability is the attempt's capability (Attempt.Capability); "" when the
	// sidecar issues none.
	Capability string
	// Run is the run the attempt belongs to (Attempt.Run). Only deriving ids
	// locally and BeginScoped read it; the sidecar knows the attempt by ID.
	Run Run
	// IDSchemeVersion is the version the sidecar derives the attempt's ids with
	// (Attempt.IDScheme().Version); 0 stands for 1.
	IDSchemeVersion int
}

// Capability is the attempt's capability: the secret that lets a process
// holding no API token make this attempt's calls, and begin the scoped
// attempts of its delivery (BeginScoped), on a sidecar started with
// --agent-capabilities. Empty when the sidecar issues none.
func (a *Attempt) Capability() string { return a.capability }

// Handle is what an agent process needs to make this attempt's calls.
func (a *Attempt) Handle() Handle {
	return Handle{ID: a.id, Capability: a.capability, Run: a.run, IDSchemeVersion: a.scheme.Version}
}

// Attempt is a handle on an attempt begun elsewhere, by a harness that handed
// this process h. Making it calls nothing; its calls carry h.Capability.
func (c *Client) Attempt(h Handle) *Attempt {
	version := h.IDSchemeVersion
	if version == 0 {
		version = 1
	}
	return &Attempt{
		client: c, id: h.ID, capability: h.Capability, run: h.Run,
		scheme: IDScheme{Version: version, Scope: h.Run.Scope},
	}
}

// BeginScoped begins a scoped attempt (run.Scope, a tool call's id say) that
// belongs to this attempt's delivery: run.DeliveryAttemptID is set to this
// attempt's id, and the call carries this attempt's capability, which is all a
// sidecar with --agent-capabilities asks of it. The new attempt has its own
// capability. A newer delivery of the run fences it, as it fences this one.
func (a *Attempt) BeginScoped(ctx context.Context, run Run) (*Attempt, error) {
	run.DeliveryAttemptID = a.id
	return a.client.Begin(a.outgoing(ctx), run)
}

// outgoing is ctx carrying the attempt's capability, which every call naming
// the attempt sends when there is one.
func (a *Attempt) outgoing(ctx context.Context) context.Context {
	if a.capability == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, CapabilityMetadata, a.capability)
}
