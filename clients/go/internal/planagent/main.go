// Command planagent is a scripted agent for the cross-language test
// (clients/crosslang): it makes a plan's writes as one attempt of a run, one
// JSON line per write on stdout, and stops dead after a number of them, as an
// agent whose lease expired would.
//
//	planagent TARGET PLAN.json STOP_AFTER
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"

	actonce "github.com/actonce/actonce/clients/go"
)

type plan struct {
	RunID      string  `json:"run_id"`
	Rule       string  `json:"rule"`
	Checkpoint string  `json:"checkpoint"`
	Writes     []write `json:"writes"`
}

type write struct {
	Op       string          `json:"op"`
	As       string          `json:"as"`
	Title    string          `json:"title"`
	Kind     string          `json:"kind"`
	Data     json.RawMessage `json:"data"`
	Artifact string          `json:"artifact"`
	Path     string          `json:"path"`
	Value    json.RawMessage `json:"value"`
	Thread   string          `json:"thread"`
	Text     string          `json:"text"`
	Tool     string          `json:"tool"`
	Effect   string          `json:"effect"`
	Args     json.RawMessage `json:"args"`
	Result   json.RawMessage `json:"result"`
}

type line struct {
	Op      string `json:"op"`
	ID      string `json:"id"`
	Outcome string `json:"outcome"`
}

var effects = map[string]actonce.Effect{
	"READ_ONLY":            actonce.EffectReadOnly,
	"IDEMPOTENT_WRITE":     actonce.EffectIdempotentWrite,
	"NON_IDEMPOTENT_WRITE": actonce.EffectNonIdempotentWrite,
}

func main() {
	if len(os.Args) != 4 {
		log.Fatal("usage: planagent TARGET PLAN.json STOP_AFTER")
	}
	raw, err := os.ReadFile(os.Args[2])
	if err != nil {
		log.Fatal(err)
	}
	var p plan
	if err := json.Unmarshal(raw, &p); err != nil {
		log.Fatal(err)
	}
	stopAfter, err := strconv.Atoi(os.Args[3])
	if err != nil {
		log.Fatal(err)
	}
	client, err := actonce.New(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	attempt, err := client.Begin(ctx, actonce.Run{ID: p.RunID, Rule: p.Rule, Checkpoint: p.Checkpoint})
	if err != nil {
		log.Fatal(err)
	}
	named := map[string]string{}
	out := json.NewEncoder(os.Stdout)
	for i, w := range p.Writes {
		if i == stopAfter {
			os.Exit(3) // dies mid-run: no EndAttempt
		}
		id, outcome, err := do(ctx, attempt, w, named)
		if err != nil {
			log.Fatalf("write %d (%s): %v", i, w.Op, err)
		}
		if w.As != "" {
			named[w.As] = id
		}
		if err := out.Encode(line{Op: w.Op, ID: id, Outcome: strings.TrimPrefix(outcome.String(), "OUTCOME_")}); err != nil {
			log.Fatal(err)
		}
	}
	if _, err := attempt.End(ctx); err != nil {
		log.Fatal(err)
	}
}

// expand puts the ids of earlier writes in place of their {names}.
func expand(text string, named map[string]string) string {
	for name, id := range named {
		text = strings.ReplaceAll(text, "{"+name+"}", id)
	}
	return text
}

func do(ctx context.Context, a *actonce.Attempt, w write, named map[string]string) (string, actonce.Outcome, error) {
	var result actonce.Write
	var err error
	switch w.Op {
	case "create_thread":
		result, err = a.CreateThread(ctx, w.Title)
	case "create":
		result, err = a.Create(ctx, w.Kind, w.Data)
	case "edit":
		result, err = a.Edit(ctx, named[w.Artifact], w.Path, w.Value)
	case "notice":
		result, err = a.Notice(ctx, named[w.Thread], expand(w.Text, named))
	case "send":
		result, err = a.Send(ctx, named[w.Thread], expand(w.Text, named))
	case "step":
		effect, ok := effects[w.Effect]
		if !ok {
			return "", 0, fmt.Errorf("unknown effect %q", w.Effect)
		}
		step, err := a.BeginStep(ctx, w.Tool, effect, w.Args)
		if err != nil {
			return "", 0, err
		}
		if !step.Done() {
			if _, err := a.EndStep(ctx, step.ID, w.Result); err != nil {
				return "", 0, err
			}
		}
		return step.ID, step.Outcome, nil
	default:
		return "", 0, fmt.Errorf("unknown op %q", w.Op)
	}
	return result.ID, result.Outcome, err
}
