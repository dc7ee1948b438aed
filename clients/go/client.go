// Package actonce is the Go client of the actonce sidecar: every write an
// agent's run makes through it lands once, however often the run is retried.
//
// A Client holds one connection to the sidecar. Each try of a run is an
// Attempt, begun from the run's last checkpoint; its writes (Create, Edit,
// Notice, CreateThread, Send, steps) get ids derived from what they are, so a
// retried attempt that makes the same writes finds them done
// (OutcomeAlreadyApplied) instead of making them twice.
//
// Every call has a deadline, and the connection retries a call the sidecar
// answered with UNAVAILABLE; the call's request_id goes with it, so a retry
// the sidecar had already answered gets that answer back. Every error from
// the sidecar is an *Error carrying its reason and failure class.
//
// Every call goes through OpenTelemetry's gRPC instrumentation (otelgrpc)
// with the global TracerProvider and propagator: an agent that sets them up
// before New gets a client span per call, and its trace goes on in the
// sidecar. Without them both are OpenTelemetry's no-ops: no span is recorded
// and no trace context is sent.
package actonce

import (
	"context"
	"errors"
	"fmt"
	"time"

	actoncev1 "github.com/actonce/actonce/clients/go/gen/actonce/v1"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// DefaultTimeout bounds a call whose context has no deadline of its own. It
// is above the sidecar's default store deadline (5s), so that a slow store
// reaches the caller as the sidecar's own STORE_DEADLINE_EXCEEDED.
const DefaultTimeout = 10 * time.Second

// serviceConfig retries UNAVAILABLE (the sidecar draining, or unable to
// reach its store, or no connection at all). A retry repeats the request as
// sent, request_id included, and the write's id is derived from what it is,
// so a write that did land is answered, not made again. Every other code
// reaches the caller at once.
const serviceConfig = `{
  "methodConfig": [{
    "name": [{"service": "actonce.v1.RunActionsService"}],
    "retryPolicy": {
      "maxAttempts": 4,
      "initialBackoff": "0.1s",
      "maxBackoff": "1s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}`

// Client is a connection to one sidecar. It is safe for concurrent use.
type Client struct {
	conn    *grpc.ClientConn
	rpc     actoncev1.RunActionsServiceClient
	timeout time.Duration
}

type options struct {
	timeout   time.Duration
	dial      []grpc.DialOption
	token     string
	tokenFile string
}

// Option configures a Client.
type Option func(*options)

// WithTimeout sets the deadline of calls whose context has none (default DefaultTimeout).
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// WithDialOptions adds gRPC dial options, e.g. transport credentials for a
// sidecar that is not on loopback or a Unix socket.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dial = append(o.dial, opts...) }
}

// New connects to the sidecar at target ("127.0.0.1:50051", "unix:///run/actonce.sock"),
// or, when target is "", at $ACTONCE_TARGET. A URL ("http://...") is refused at
// once, an *Error (INVALID_ARGUMENT, Permanent) saying to write HOST:PORT.
// The sidecar runs in the agent's pod, so the connection is plaintext unless
// WithDialOptions says otherwise. Every call carries the sidecar's API token
// when there is one: WithAPIToken or WithAPITokenFile, else the file named by
// ACTONCE_API_TOKEN_FILE, else ACTONCE_API_TOKEN.
func New(target string, opts ...Option) (*Client, error) {
	o := options{timeout: DefaultTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	target, err := resolveTarget(target)
	if err != nil {
		return nil, err
	}
	token, err := resolveToken(o)
	if err != nil {
		return nil, err
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(serviceConfig),
		// The global TracerProvider and propagator, as set when New is called.
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
	}
	if token != nil {
		dial = append(dial, grpc.WithPerRPCCredentials(token))
	}
	dial = append(dial, o.dial...)
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("actonce: connect to %s: %w", target, err)
	}
	return &Client{conn: conn, rpc: actoncev1.NewRunActionsServiceClient(conn), timeout: o.timeout}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Run names the run an attempt belongs to.
type Run struct {
	// ID is the run's id, the same for every attempt of the run.
	ID string
	// Rule is the automation the run belongs to; the sidecar's send allowlist names rules.
	Rule string
	// Checkpoint is the run's last checkpoint, empty at the run's start.
	Checkpoint string
	// LeaseDeadline is when the queue's lease on the run ends; zero for none.
	// The sidecar refuses writes that the lease would not outlast.
	LeaseDeadline time.Time
	// Scope is the attempt's part of the run, stable across its retries (a
	// tool call's id, say); empty for an unscoped attempt. Fencing and derived
	// ids are per (run, scope): sibling scopes never fence each other, and the
	// same write in two scopes is two writes.
	Scope string
	// DeliveryAttemptID names the delivery a scoped attempt belongs to: the
	// unscoped attempt of the queue's delivery of the job, whose tool call it
	// is. A newer delivery of the run then fences this attempt too. Empty: the
	// attempt belongs to no delivery. Not an input of any derived id.
	DeliveryAttemptID string
}

// Begin starts one try of run from its checkpoint.
func (c *Client) Begin(ctx context.Context, run Run) (*Attempt, error) {
	req := &actoncev1.BeginAttemptRequest{
		RunId: run.ID, Rule: run.Rule, Checkpoint: run.Checkpoint, Scope: run.Scope,
		DeliveryAttemptId: run.DeliveryAttemptID,
	}
	if !run.LeaseDeadline.IsZero() {
		req.LeaseDeadline = timestamppb.New(run.LeaseDeadline)
	}
	resp, err := invoke(ctx, c, "", c.rpc.BeginAttempt, req)
	if err != nil {
		return nil, err
	}
	version := int(resp.GetIdSchemeVersion())
	if version == 0 {
		version = 1 // a sidecar from before scheme versions derives version 1
	}
	return &Attempt{
		client: c, id: resp.GetAttemptId(), capability: resp.GetCapability(), run: run,
		scheme: IDScheme{Version: version, Scope: run.Scope},
	}, nil
}

// invoke makes one unary call with the client's deadline. Its failure becomes
// an *Error carrying requestID, classified from the status and the raw
// grpc-status-details-bin trailer (see fromRPC).
func invoke[Req, Resp any](ctx context.Context, c *Client, requestID string,
	call func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req,
) (Resp, error) {
	callCtx, cancel := c.deadline(ctx)
	defer cancel()
	var trailer metadata.MD
	resp, err := call(callCtx, req, grpc.Trailer(&trailer))
	if err != nil {
		var none Resp
		return none, fromRPC(err, trailer, requestID, errors.Is(ctx.Err(), context.Canceled))
	}
	return resp, nil
}

// deadline gives ctx the client's timeout unless it already has a deadline.
func (c *Client) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}
