package actonce_test

import (
	"context"
	"net"
	"sync"
	"testing"

	actonce "github.com/actonce/actonce/clients/go"
	actoncev1 "github.com/actonce/actonce/clients/go/gen/actonce/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// drainingServer answers the first try of every Create with UNAVAILABLE, as a
// draining sidecar does, and records the request_id of every try. It stands
// in for the transport, not for the sidecar's rules, which the other tests
// check against a real sidecar.
type drainingServer struct {
	actoncev1.UnimplementedRunActionsServiceServer
	mu    sync.Mutex
	tries []string
}

func (s *drainingServer) BeginAttempt(context.Context, *actoncev1.BeginAttemptRequest) (*actoncev1.BeginAttemptResponse, error) {
	return &actoncev1.BeginAttemptResponse{AttemptId: "att_1"}, nil
}

func (s *drainingServer) Create(_ context.Context, req *actoncev1.CreateRequest) (*actoncev1.CreateResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tries = append(s.tries, req.GetRequestId())
	if len(s.tries)%2 == 1 {
		return nil, status.Error(codes.Unavailable, "draining")
	}
	return &actoncev1.CreateResponse{Id: "art_1", Outcome: actonce.OutcomeApplied}, nil
}

func TestTransportRetryResendsTheSameRequestID(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	fake := &drainingServer{}
	actoncev1.RegisterRunActionsServiceServer(server, fake)
	go server.Serve(listener)
	defer server.Stop()

	client, err := actonce.New(listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	attempt, err := client.Begin(ctx, actonce.Run{ID: "run-1", Rule: "r"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := attempt.Create(ctx, "ticket", map[string]int{"n": 1}); err != nil {
			t.Fatalf("Create after one UNAVAILABLE: %v", err)
		}
	}
	if len(fake.tries) != 4 || fake.tries[0] != fake.tries[1] || fake.tries[2] != fake.tries[3] ||
		fake.tries[0] == fake.tries[2] || fake.tries[0] == "" {
		t.Errorf("request_ids per try %q: want each call's retry to resend its own fresh id", fake.tries)
	}
}
