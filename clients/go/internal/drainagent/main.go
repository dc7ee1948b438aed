// Command drainagent is a load agent for the drain test (clients/crosslang): it
// runs runs back to back, three creates each, one JSON line per acknowledged
// write on stdout, until a call fails; then it prints that failure as the
// client classified it, and exits 0.
//
//	drainagent TARGET NAME
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	actonce "github.com/actonce/actonce/clients/go"
)

func main() {
	if len(os.Args) != 3 {
		log.Fatal("usage: drainagent TARGET NAME")
	}
	name := os.Args[2]
	// As long a deadline as the other languages' agents: the drain test's slow store answers
	// in 8 s, which a busy machine can stretch past the default 10 s.
	client, err := actonce.New(os.Args[1], actonce.WithTimeout(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	out := json.NewEncoder(os.Stdout)
	for run := 0; ; run++ {
		runID := fmt.Sprintf("%s-%d", name, run)
		attempt, err := client.Begin(ctx, actonce.Run{ID: runID, Rule: "drain", Checkpoint: "c"})
		if err != nil {
			fail(out, err)
		}
		for n := 0; n < 3; n++ {
			data, _ := json.Marshal(map[string]any{"agent": name, "run": run, "n": n})
			written, err := attempt.Create(ctx, "ticket", json.RawMessage(data))
			if err != nil {
				fail(out, err)
			}
			if err := out.Encode(map[string]string{"id": written.ID}); err != nil {
				log.Fatal(err)
			}
		}
		if _, err := attempt.End(ctx); err != nil {
			fail(out, err)
		}
	}
}

func fail(out *json.Encoder, err error) {
	var refused *actonce.Error
	if !errors.As(err, &refused) {
		log.Fatalf("not an actonce error: %v", err)
	}
	if err := out.Encode(map[string]string{
		"code": refused.Code.String(), "reason": refused.Reason, "failure_class": string(refused.Class),
		"message": refused.Message,
	}); err != nil {
		log.Fatal(err)
	}
	os.Exit(0)
}
