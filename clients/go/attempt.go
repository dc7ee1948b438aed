package actonce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	actoncev1 "github.com/actonce/actonce/clients/go/gen/actonce/v1"
	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Outcome says what a successful write did.
type Outcome = actoncev1.Outcome

const (
	// OutcomeApplied: the write was made now.
	OutcomeApplied = actoncev1.Outcome_OUTCOME_APPLIED
	// OutcomeAlreadyApplied: an earlier attempt of the run made this write.
	OutcomeAlreadyApplied = actoncev1.Outcome_OUTCOME_ALREADY_APPLIED
	// OutcomeSkipped: the edit's value was already there; nothing changed.
	OutcomeSkipped = actoncev1.Outcome_OUTCOME_SKIPPED
	// OutcomeUnrecognized: the write succeeded with an outcome this client does
	// not know (a newer sidecar's). It landed: it is not an error, and must not
	// be repeated with a fresh request_id.
	OutcomeUnrecognized Outcome = -1
)

func outcomeOf(o Outcome) Outcome {
	switch o {
	case OutcomeApplied, OutcomeAlreadyApplied, OutcomeSkipped:
		return o
	default:
		return OutcomeUnrecognized
	}
}

// Effect is what one of the agent's own tool calls does to the world (ADR-111).
type Effect = actoncev1.ToolEffect

const (
	EffectReadOnly           = actoncev1.ToolEffect_TOOL_EFFECT_READ_ONLY
	EffectIdempotentWrite    = actoncev1.ToolEffect_TOOL_EFFECT_IDEMPOTENT_WRITE
	EffectNonIdempotentWrite = actoncev1.ToolEffect_TOOL_EFFECT_NON_IDEMPOTENT_WRITE
)

// Write is what a successful write made.
type Write struct {
	// ID is the derived id of what was written: the artifact, proposal,
	// thread or message. For a direct edit, the edited artifact's id.
	ID      string
	Outcome Outcome
	// Version is the artifact's version after a create or an edit.
	Version int64
}

// Artifact is a versioned JSON document in the store.
type Artifact struct {
	ID       string
	Kind     string
	Version  int64
	Data     json.RawMessage
	Archived bool
}

// Message is one entry of a thread: Kind "notice" or "message".
type Message struct {
	ID   string
	Kind string
	Text string
}

// Step is the sidecar's answer to BeginStep.
type Step struct {
	ID      string
	Outcome Outcome
	// Result is the recorded result when an earlier attempt ended the step.
	Result json.RawMessage
}

// Done reports whether an earlier attempt made and ended this tool call: do
// not make it again, use Result.
func (s Step) Done() bool { return s.Outcome == OutcomeAlreadyApplied }

// Counts are an attempt's writes by outcome.
type Counts struct {
	Applied, AlreadyApplied, Skipped, Failed int64
}

type writeOptions struct {
	requestID string
	propose   bool
	key       string
}

// WriteOption configures one write.
type WriteOption func(*writeOptions)

// WithRequestID sends the write with this request_id instead of a fresh one.
// Repeating a call with the id of its first try (Error.RequestID), in the same
// attempt, gets the first answer back: use it after an error that left the
// outcome unknown (DEADLINE_EXCEEDED, a dropped connection).
func WithRequestID(id string) WriteOption {
	return func(o *writeOptions) { o.requestID = id }
}

// Propose offers a Create or an Edit for review instead of applying it.
func Propose() WriteOption {
	return func(o *writeOptions) { o.propose = true }
}

// WithKey names a Create, a CreateThread or a BeginStep by a key of the
// caller's (1 to 255 bytes), unique within the run and checkpoint: its id
// derives from the key instead of the data, title or arguments, so a
// redelivery whose data differs (a timestamp, a uuid) finds the same artifact,
// thread or step. The same key with other data is refused with reason
// KEY_REUSED (class Refused).
func WithKey(key string) WriteOption {
	return func(o *writeOptions) { o.key = key }
}

var (
	errProposeOnly = errors.New("actonce: Propose applies to Create and Edit only")
	errKeyOnly     = errors.New("actonce: WithKey applies to Create, CreateThread and BeginStep only")
)

// takes refuses the options a write does not take.
func (o writeOptions) takes(propose, key bool) error {
	switch {
	case o.propose && !propose:
		return errProposeOnly
	case o.key != "" && !key:
		return errKeyOnly
	}
	return nil
}

// NewRequestID is a fresh request_id. Each write gets one unless it is given
// one with WithRequestID: choose it yourself before the first try to know it
// whatever happens to the call. An *Error from a write carries it too.
func NewRequestID() string { return uuid.NewString() }

func applyWrite(opts []WriteOption) writeOptions {
	// A fresh id per call; gRPC's own retries resend the same bytes, so they
	// carry the same id.
	o := writeOptions{requestID: NewRequestID()}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Attempt is one try of a run. Its methods are safe for concurrent use: the
// sidecar counts identical writes, not their order.
type Attempt struct {
	client     *Client
	id         string
	capability string
	run        Run
	scheme     IDScheme
}

// ID is the sidecar's id of this attempt.
func (a *Attempt) ID() string { return a.id }

// Run is the run this attempt belongs to.
func (a *Attempt) Run() Run { return a.run }

// IDScheme is the scheme version the sidecar derives this attempt's ids with,
// and the attempt's scope: IDScheme().DeriveID gives the ids it will answer.
func (a *Attempt) IDScheme() IDScheme { return a.scheme }

// Create makes an artifact of kind with data, or proposes it with Propose().
// data is marshalled with encoding/json; a json.RawMessage (for instance a
// model's own output) is sent as it is, and the sidecar checks it.
func (a *Attempt) Create(ctx context.Context, kind string, data any, opts ...WriteOption) (Write, error) {
	text, err := jsonText(data)
	if err != nil {
		return Write{}, err
	}
	o := applyWrite(opts)
	if err := o.takes(true, true); err != nil {
		return Write{}, err
	}
	resp, err := invoke(a.outgoing(ctx), a.client, o.requestID, a.client.rpc.Create, &actoncev1.CreateRequest{
		AttemptId: a.id, Kind: kind, DataJson: text, Propose: o.propose, RequestId: o.requestID, Key: o.key,
	})
	if err != nil {
		return Write{}, err
	}
	return Write{ID: resp.GetId(), Outcome: outcomeOf(resp.GetOutcome()), Version: resp.GetVersion()}, nil
}

// Edit sets value at the JSON Pointer path of an artifact, or proposes that
// change with Propose(). It is skipped (OutcomeSkipped) when the value is
// already there.
func (a *Attempt) Edit(ctx context.Context, artifactID, path string, value any, opts ...WriteOption) (Write, error) {
	text, err := jsonText(value)
	if err != nil {
		return Write{}, err
	}
	o := applyWrite(opts)
	if err := o.takes(true, false); err != nil {
		return Write{}, err
	}
	resp, err := invoke(a.outgoing(ctx), a.client, o.requestID, a.client.rpc.Edit, &actoncev1.EditRequest{
		AttemptId: a.id, ArtifactId: artifactID, Path: path, ValueJson: text,
		Propose: o.propose, RequestId: o.requestID,
	})
	if err != nil {
		return Write{}, err
	}
	id := artifactID
	if o.propose {
		id = resp.GetProposalId()
	}
	return Write{ID: id, Outcome: outcomeOf(resp.GetOutcome()), Version: resp.GetVersion()}, nil
}

// Notice posts text to a thread as a notice, which starts and steers no turn.
func (a *Attempt) Notice(ctx context.Context, threadID, text string, opts ...WriteOption) (Write, error) {
	o := applyWrite(opts)
	if err := o.takes(false, false); err != nil {
		return Write{}, err
	}
	resp, err := invoke(a.outgoing(ctx), a.client, o.requestID, a.client.rpc.Notice, &actoncev1.NoticeRequest{
		AttemptId: a.id, ThreadId: threadID, Text: text, RequestId: o.requestID,
	})
	if err != nil {
		return Write{}, err
	}
	return Write{ID: resp.GetMessageId(), Outcome: outcomeOf(resp.GetOutcome())}, nil
}

// Send posts text to a thread as a message that asks for the thread's turn.
// Only rules on the sidecar's send allowlist may send; others get a
// PERMANENT error with reason FORBIDDEN.
func (a *Attempt) Send(ctx context.Context, threadID, text string, opts ...WriteOption) (Write, error) {
	o := applyWrite(opts)
	if err := o.takes(false, false); err != nil {
		return Write{}, err
	}
	resp, err := invoke(a.outgoing(ctx), a.client, o.requestID, a.client.rpc.Send, &actoncev1.SendRequest{
		AttemptId: a.id, ThreadId: threadID, Text: text, RequestId: o.requestID,
	})
	if err != nil {
		return Write{}, err
	}
	return Write{ID: resp.GetMessageId(), Outcome: outcomeOf(resp.GetOutcome())}, nil
}

// CreateThread makes a conversation thread with a title.
func (a *Attempt) CreateThread(ctx context.Context, title string, opts ...WriteOption) (Write, error) {
	o := applyWrite(opts)
	if err := o.takes(false, true); err != nil {
		return Write{}, err
	}
	resp, err := invoke(a.outgoing(ctx), a.client, o.requestID, a.client.rpc.CreateThread, &actoncev1.CreateThreadRequest{
		AttemptId: a.id, Title: title, RequestId: o.requestID, Key: o.key,
	})
	if err != nil {
		return Write{}, err
	}
	return Write{ID: resp.GetThreadId(), Outcome: outcomeOf(resp.GetOutcome())}, nil
}

// ReadArtifact returns an artifact as the store holds it now.
func (a *Attempt) ReadArtifact(ctx context.Context, artifactID string) (Artifact, error) {
	resp, err := invoke(a.outgoing(ctx), a.client, "", a.client.rpc.Read, &actoncev1.ReadRequest{
		AttemptId: a.id, Target: &actoncev1.ReadRequest_ArtifactId{ArtifactId: artifactID},
	})
	if err != nil {
		return Artifact{}, err
	}
	got := resp.GetArtifact()
	return Artifact{
		ID: got.GetId(), Kind: got.GetKind(), Version: got.GetVersion(),
		Data: json.RawMessage(got.GetDataJson()), Archived: got.GetArchived(),
	}, nil
}

// ReadThread returns a thread's messages, oldest first.
func (a *Attempt) ReadThread(ctx context.Context, threadID string) ([]Message, error) {
	resp, err := invoke(a.outgoing(ctx), a.client, "", a.client.rpc.Read, &actoncev1.ReadRequest{
		AttemptId: a.id, Target: &actoncev1.ReadRequest_ThreadId{ThreadId: threadID},
	})
	if err != nil {
		return nil, err
	}
	messages := make([]Message, 0, len(resp.GetMessages()))
	for _, m := range resp.GetMessages() {
		messages = append(messages, Message{ID: m.GetId(), Kind: m.GetKind(), Text: m.GetText()})
	}
	return messages, nil
}

// BeginStep declares one of the agent's own tool calls before making it. When
// the returned Step is Done, an earlier attempt made the call: use its Result.
// A non-idempotent call that began earlier and never ended is refused with
// reason IN_DOUBT (class UNKNOWN): it is never made again automatically.
func (a *Attempt) BeginStep(ctx context.Context, tool string, effect Effect, args any, opts ...WriteOption) (Step, error) {
	text, err := jsonText(args)
	if err != nil {
		return Step{}, err
	}
	o := applyWrite(opts)
	if err := o.takes(false, true); err != nil {
		return Step{}, err
	}
	resp, err := invoke(a.outgoing(ctx), a.client, o.requestID, a.client.rpc.BeginStep, &actoncev1.BeginStepRequest{
		AttemptId: a.id, Tool: tool, Effect: effect, ArgsJson: text, RequestId: o.requestID, Key: o.key,
	})
	if err != nil {
		return Step{}, err
	}
	step := Step{ID: resp.GetStepId(), Outcome: outcomeOf(resp.GetOutcome())}
	if resp.GetResultJson() != "" {
		step.Result = json.RawMessage(resp.GetResultJson())
	}
	return step, nil
}

// EndStep records the result of a step begun with BeginStep.
func (a *Attempt) EndStep(ctx context.Context, stepID string, result any, opts ...WriteOption) (Outcome, error) {
	text, err := jsonText(result)
	if err != nil {
		return 0, err
	}
	o := applyWrite(opts)
	if err := o.takes(false, false); err != nil {
		return 0, err
	}
	resp, err := invoke(a.outgoing(ctx), a.client, o.requestID, a.client.rpc.EndStep, &actoncev1.EndStepRequest{
		AttemptId: a.id, StepId: stepID, ResultJson: text, RequestId: o.requestID,
	})
	if err != nil {
		return 0, err
	}
	return outcomeOf(resp.GetOutcome()), nil
}

// AbortStep declares that a step begun with BeginStep did not act: the tool
// refused before acting, or was never called. A later try may run it, under
// the same step id. Only for what provably did not act; an ended step cannot
// be aborted (STEP_ENDED), nor an aborted one ended (STEP_ABORTED).
func (a *Attempt) AbortStep(ctx context.Context, stepID, reason string, opts ...WriteOption) (Outcome, error) {
	o := applyWrite(opts)
	if err := o.takes(false, false); err != nil {
		return 0, err
	}
	resp, err := invoke(a.outgoing(ctx), a.client, o.requestID, a.client.rpc.AbortStep, &actoncev1.AbortStepRequest{
		AttemptId: a.id, StepId: stepID, Reason: reason, RequestId: o.requestID,
	})
	if err != nil {
		return 0, err
	}
	return outcomeOf(resp.GetOutcome()), nil
}

// ExtendLease moves the attempt's lease deadline and returns the one in force.
func (a *Attempt) ExtendLease(ctx context.Context, deadline time.Time) (time.Time, error) {
	resp, err := invoke(a.outgoing(ctx), a.client, "", a.client.rpc.ExtendLease, &actoncev1.ExtendLeaseRequest{
		AttemptId: a.id, LeaseDeadline: timestamppb.New(deadline),
	})
	if err != nil {
		return time.Time{}, err
	}
	return resp.GetLeaseDeadline().AsTime(), nil
}

// End closes the attempt and returns its writes by outcome.
func (a *Attempt) End(ctx context.Context) (Counts, error) {
	resp, err := invoke(a.outgoing(ctx), a.client, "", a.client.rpc.EndAttempt, &actoncev1.EndAttemptRequest{AttemptId: a.id})
	if err != nil {
		return Counts{}, err
	}
	return Counts{
		Applied: resp.GetApplied(), AlreadyApplied: resp.GetAlreadyApplied(),
		Skipped: resp.GetSkipped(), Failed: resp.GetFailed(),
	}, nil
}

func jsonText(value any) (string, error) {
	if raw, ok := value.(json.RawMessage); ok {
		return string(raw), nil
	}
	text, err := json.Marshal(value)
	if err != nil {
		return "", fmt.Errorf("actonce: encode JSON: %w", err)
	}
	return string(text), nil
}
