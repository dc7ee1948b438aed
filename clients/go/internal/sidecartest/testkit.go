package sidecartest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Program is one of the shared test programs of clients/testkit, run by the
// repository's Python: its target, and a conversation line by line on its
// stdin and stdout. It stops when Stop closes its stdin.
type Program struct {
	Target string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
}

// python is $ACTONCE_PYTHON, else the repository's venv.
func python() (string, error) {
	if given := os.Getenv("ACTONCE_PYTHON"); given != "" {
		return given, nil
	}
	return filepath.Abs(filepath.Join("..", "..", ".venv", "bin", "python"))
}

// StartTestkit runs clients/testkit/<script> with args and reads its target.
func StartTestkit(script string, args ...string) (*Program, error) {
	bin, err := python()
	if err != nil {
		return nil, err
	}
	path, err := filepath.Abs(filepath.Join("..", "testkit", script))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{path}, args...)...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Program{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout)}
	if p.Target, err = p.line(); err != nil || p.Target == "" {
		p.Stop()
		return nil, fmt.Errorf("%s did not start: %v", script, err)
	}
	return p, nil
}

func (p *Program) line() (string, error) {
	line, err := p.stdout.ReadString('\n')
	return strings.TrimSpace(line), err
}

// Command sends one command line and returns the program's answer.
func (p *Program) Command(line string) (string, error) {
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		return "", err
	}
	return p.line()
}

// Stop closes the program's stdin, which ends it, and waits for it.
func (p *Program) Stop() {
	p.stdin.Close()
	p.cmd.Wait()
}
