// Package sidecartest starts a real `actonce serve` for the tests: on a free
// loopback port, with its data in a temporary folder, ready once its health
// service says SERVING.
package sidecartest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// SendRule is the one rule the test sidecar's send allowlist names.
const SendRule = "allowed-sender"

// Sidecar is a running `actonce serve`.
type Sidecar struct {
	Target  string
	cmd     *exec.Cmd
	dataDir string
	log     *bytes.Buffer
	done    chan struct{} // closed when the process has exited
	exitErr error
}

// binary is the actonce command: $ACTONCE_BIN, else the repository's venv.
func binary() (string, error) {
	if bin := os.Getenv("ACTONCE_BIN"); bin != "" {
		return bin, nil
	}
	return filepath.Abs(filepath.Join("..", "..", ".venv", "bin", "actonce"))
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start runs a sidecar, with extra flags of `actonce serve` if any, and waits
// until it serves.
func Start(flags ...string) (*Sidecar, error) {
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dataDir, err := os.MkdirTemp("", "actonce-go-test-")
	if err != nil {
		return nil, err
	}
	s := &Sidecar{Target: fmt.Sprintf("127.0.0.1:%d", port), dataDir: dataDir, log: &bytes.Buffer{}}
	s.cmd = exec.Command(bin, append([]string{"serve", "--listen", s.Target, "--data-dir", dataDir,
		"--send-allowlist", SendRule, "--log-format", "json", "--log-level", "warning"}, flags...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	// `actonce serve` refuses ACTONCE_* variables it does not know, and
	// ACTONCE_BIN is this package's, not the sidecar's.
	s.cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "ACTONCE_BIN=") })
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dataDir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s.done = make(chan struct{})
	go func() { s.exitErr = s.cmd.Wait(); close(s.done) }()
	if err := s.waitServing(30 * time.Second); err != nil {
		s.Stop()
		return nil, fmt.Errorf("%w\nsidecar output:\n%s", err, s.log)
	}
	return s, nil
}

func (s *Sidecar) waitServing(limit time.Duration) error {
	conn, err := grpc.NewClient(s.Target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("sidecar exited before serving: %v", s.exitErr)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: "actonce.v1.RunActionsService"})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("sidecar at %s not SERVING within %s", s.Target, limit)
}

// Stop ends the sidecar and removes its data.
func (s *Sidecar) Stop() {
	_ = s.cmd.Process.Kill()
	<-s.done
	_ = os.RemoveAll(s.dataDir)
}
