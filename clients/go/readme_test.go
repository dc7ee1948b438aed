package actonce_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README's example is the one developers copy: it must build and run.
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```go\n(package main\n.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README.md has no ```go block with a main package")
	}
	source := strings.Replace(string(block[1]), "127.0.0.1:50051", sidecar.Target, 1)
	client, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goMod := "module readme\n\ngo 1.26\n\nrequire github.com/actonce/actonce/clients/go v0.0.0\n\n" +
		"replace github.com/actonce/actonce/clients/go => " + client + "\n"
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"go.mod": []byte(goMod), "go.sum": sum, "main.go": []byte(source)} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"mod", "tidy"}, {"run", "."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "run" && !regexp.MustCompile(`^art_[a-z2-7]{26} OUTCOME_(ALREADY_)?APPLIED\n$`).Match(out) {
			t.Errorf("example printed %q", out)
		}
	}
}
