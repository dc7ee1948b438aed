package actonce_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	actonce "github.com/actonce/actonce/clients/go"
	actoncev1 "github.com/actonce/actonce/clients/go/gen/actonce/v1"
	"github.com/actonce/actonce/clients/go/internal/sidecartest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

const apiToken = "go-t0ken-8a31"

// writeToken swaps a new token file in whole, as the kubelet updates a Secret.
func writeToken(t *testing.T, path, token string) {
	t.Helper()
	fresh := path + ".new"
	if err := os.WriteFile(fresh, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fresh, path); err != nil {
		t.Fatal(err)
	}
}

// startGuarded runs a sidecar that needs the API token in the file it returns.
func startGuarded(t *testing.T) (*sidecartest.Sidecar, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "api.token")
	writeToken(t, path, apiToken)
	guarded, err := sidecartest.Start("--api-token-file", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(guarded.Stop)
	return guarded, path
}

func isUnauthenticated(err error) bool {
	var e *actonce.Error
	return errors.As(err, &e) && e.Code == codes.Unauthenticated &&
		e.Reason == "UNAUTHENTICATED" && e.Class == actonce.Permanent
}

// rpcCall is one call of an RPC, named, through the client.
type rpcCall struct {
	rpc  string
	call func(context.Context, *actonce.Attempt) error
}

// everyRPC begins an attempt with what each call needs, and returns it with
// one call of every RPC through the client, by the RPC's name.
func everyRPC(t *testing.T, client *actonce.Client) (*actonce.Attempt, []rpcCall) {
	t.Helper()
	ctx := context.Background()
	a := begin(t, client, newRun(sidecartest.SendRule))
	ticket := must[actonce.Write](t)(a.Create(ctx, "ticket", map[string]int{"n": 1}))
	thread := must[actonce.Write](t)(a.CreateThread(ctx, "incident"))
	step := must[actonce.Step](t)(a.BeginStep(ctx, "charge", actonce.EffectNonIdempotentWrite, map[string]int{"amount": 1}))
	unused := must[actonce.Step](t)(a.BeginStep(ctx, "page", actonce.EffectNonIdempotentWrite, map[string]string{"who": "ops"}))
	lease := time.Now().Add(time.Hour).Truncate(time.Second)
	ok := func(_ any, err error) error { return err }
	return a, []rpcCall{
		{"BeginAttempt", func(ctx context.Context, _ *actonce.Attempt) error {
			return ok(client.Begin(ctx, newRun(sidecartest.SendRule)))
		}},
		{"Create", func(ctx context.Context, a *actonce.Attempt) error {
			return ok(a.Create(ctx, "ticket", map[string]int{"n": 2}))
		}},
		{"Edit", func(ctx context.Context, a *actonce.Attempt) error {
			return ok(a.Edit(ctx, ticket.ID, "/status", "open"))
		}},
		{"Notice", func(ctx context.Context, a *actonce.Attempt) error {
			return ok(a.Notice(ctx, thread.ID, "filed"))
		}},
		{"CreateThread", func(ctx context.Context, a *actonce.Attempt) error {
			return ok(a.CreateThread(ctx, "another"))
		}},
		{"Send", func(ctx context.Context, a *actonce.Attempt) error {
			return ok(a.Send(ctx, thread.ID, "please look"))
		}},
		{"Read", func(ctx context.Context, a *actonce.Attempt) error {
			return ok(a.ReadArtifact(ctx, ticket.ID))
		}},
		{"BeginStep", func(ctx context.Context, a *actonce.Attempt) error {
			return ok(a.BeginStep(ctx, "refund", actonce.EffectIdempotentWrite, map[string]int{}))
		}},
		{"EndStep", func(ctx context.Context, a *actonce.Attempt) error {
			return ok(a.EndStep(ctx, step.ID, map[string]bool{"charged": true}))
		}},
		{"AbortStep", func(ctx context.Context, a *actonce.Attempt) error {
			return ok(a.AbortStep(ctx, unused.ID, "never called"))
		}},
		{"ExtendLease", func(ctx context.Context, a *actonce.Attempt) error {
			return ok(a.ExtendLease(ctx, lease))
		}},
		{"EndAttempt", func(ctx context.Context, a *actonce.Attempt) error {
			return ok(a.End(ctx))
		}},
	}
}

// With a token configured, every RPC refuses a call without it, or with
// another, and takes one with it. The RPCs come from the service descriptor,
// so that one added later is checked too.
func TestEveryRPCRefusesACallWithoutTheAPIToken(t *testing.T) {
	t.Setenv(actonce.APITokenFileEnv, "")
	t.Setenv(actonce.APITokenEnv, "")
	guarded, _ := startGuarded(t)
	ctx := context.Background()
	var rpcs []string
	for _, m := range actoncev1.RunActionsService_ServiceDesc.Methods {
		rpcs = append(rpcs, m.MethodName)
	}

	// Without any token, each method of the descriptor, called raw.
	conn, err := grpc.NewClient(guarded.Target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, rpc := range rpcs {
		err := conn.Invoke(ctx, "/"+actoncev1.RunActionsService_ServiceDesc.ServiceName+"/"+rpc,
			&emptypb.Empty{}, &emptypb.Empty{})
		st := status.Convert(err)
		if st.Code() != codes.Unauthenticated {
			t.Fatalf("%s without a token: %v", rpc, err)
		}
		var reason string
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				reason = info.GetReason() + "/" + info.GetDomain() + "/" + info.GetMetadata()["failure_class"]
			}
		}
		if reason != "UNAUTHENTICATED/actonce/PERMANENT" {
			t.Fatalf("%s without a token: ErrorInfo %q", rpc, reason)
		}
	}
	bare, err := actonce.New(guarded.Target)
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if _, err := bare.Begin(ctx, newRun("any")); !isUnauthenticated(err) {
		t.Fatalf("Begin without a token: %v", err)
	}

	// Through the client: with the token, then with another in its file, then with it
	// again. The client's file is its own: the sidecar's follows its file too.
	mine := filepath.Join(t.TempDir(), "client.token")
	writeToken(t, mine, apiToken)
	client, err := actonce.New(guarded.Target, actonce.WithAPITokenFile(mine))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	attempt, calls := everyRPC(t, client)
	var named []string
	for _, c := range calls {
		named = append(named, c.rpc)
	}
	sort.Strings(named)
	sort.Strings(rpcs)
	if !slices.Equal(named, rpcs) {
		t.Fatalf("calls for %v, the service has %v: a new RPC needs its call here", named, rpcs)
	}
	writeToken(t, mine, "not-the-token")
	time.Sleep(1100 * time.Millisecond) // the client reads its file again once a second
	for _, c := range calls {
		if err := c.call(ctx, attempt); !isUnauthenticated(err) {
			t.Fatalf("%s with another token: %v", c.rpc, err)
		}
	}
	writeToken(t, mine, apiToken)
	time.Sleep(1100 * time.Millisecond)
	// With the token back in the file, each goes through.
	for _, c := range calls {
		if err := c.call(ctx, attempt); err != nil {
			t.Fatalf("%s with the token: %v", c.rpc, err)
		}
	}
}

// The token comes from an option, else ACTONCE_API_TOKEN_FILE, else ACTONCE_API_TOKEN.
func TestTheAPITokenComesFromAnOptionOrTheEnvironment(t *testing.T) {
	guarded, path := startGuarded(t)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		env  map[string]string
		opts []actonce.Option
	}{
		{"WithAPIToken", nil, []actonce.Option{actonce.WithAPIToken(apiToken)}},
		{"WithAPITokenFile", nil, []actonce.Option{actonce.WithAPITokenFile(path)}},
		{"ACTONCE_API_TOKEN_FILE", map[string]string{actonce.APITokenFileEnv: path}, nil},
		{"ACTONCE_API_TOKEN", map[string]string{actonce.APITokenEnv: apiToken}, nil},
		{"an option over the environment", map[string]string{actonce.APITokenEnv: "wrong"},
			[]actonce.Option{actonce.WithAPIToken(apiToken)}},
		{"the file over the value", map[string]string{actonce.APITokenFileEnv: path, actonce.APITokenEnv: "wrong"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(actonce.APITokenFileEnv, "")
			t.Setenv(actonce.APITokenEnv, "")
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			client, err := actonce.New(guarded.Target, c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			if _, err := client.Begin(ctx, newRun("any")); err != nil {
				t.Fatal(err)
			}
		})
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{empty, filepath.Join(t.TempDir(), "missing")} {
		if _, err := actonce.New(guarded.Target, actonce.WithAPITokenFile(bad)); err == nil {
			t.Errorf("New with the token file %s: no error", bad)
		}
	}
}
