package actonce

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

// text is a vector's input string; a long one is written as {prefix, repeat, times, suffix}.
type text string

func (t *text) UnmarshalJSON(raw []byte) error {
	var plain string
	if err := json.Unmarshal(raw, &plain); err == nil {
		*t = text(plain)
		return nil
	}
	var long struct {
		Prefix, Repeat, Suffix string
		Times                  int
	}
	if err := json.Unmarshal(raw, &long); err != nil {
		return err
	}
	*t = text(long.Prefix + strings.Repeat(long.Repeat, long.Times) + long.Suffix)
	return nil
}

type vector struct {
	Name       string          `json:"name"`
	Version    int             `json:"scheme_version"`
	WriteType  WriteType       `json:"write_type"`
	RunID      text            `json:"run_id"`
	Scope      text            `json:"scope"`
	Checkpoint text            `json:"checkpoint"`
	Input      map[string]text `json:"input"`
	Identity   []string        `json:"identity"`
	Occurrence int             `json:"occurrence"`
	Material   string          `json:"material"`
	ID         string          `json:"id"`
	Field      string          `json:"field"`
}

func loadVectors(t *testing.T) []vector {
	t.Helper()
	return loadVectorFile(t).Vectors
}

func loadRefusals(t *testing.T) []vector {
	t.Helper()
	return loadVectorFile(t).Refusals
}

type vectorFile struct {
	SchemeVersion int      `json:"scheme_version"`
	Vectors       []vector `json:"vectors"`
	Refusals      []vector `json:"refusals"`
}

func loadVectorFile(t *testing.T) vectorFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "derived-id-vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file vectorFile
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if file.SchemeVersion != SchemeVersion {
		t.Fatalf("vectors are for scheme %d, this package implements %d", file.SchemeVersion, SchemeVersion)
	}
	if len(file.Vectors) == 0 || len(file.Refusals) == 0 {
		t.Fatal("no vectors")
	}
	return file
}

func (v vector) scheme() IDScheme { return IDScheme{Version: v.Version, Scope: string(v.Scope)} }

// keyed: a vector whose input names a key is a write the caller named by it.
func (v vector) keyed() bool {
	_, ok := v.Input["key"]
	return ok
}

// derive is the vector's id, keyed or not.
func (v vector) derive(identity []string, occurrence int) (string, error) {
	if v.keyed() {
		return v.scheme().DeriveKeyedID(v.WriteType, string(v.RunID), string(v.Checkpoint), identity)
	}
	return v.scheme().DeriveID(v.WriteType, string(v.RunID), string(v.Checkpoint), identity, occurrence)
}

func TestVersionOneDeriveIDIsTheUnscopedVersionOneScheme(t *testing.T) {
	for _, v := range loadVectors(t) {
		if v.Version != 1 || v.keyed() {
			continue
		}
		id, err := DeriveID(v.WriteType, string(v.RunID), string(v.Checkpoint), v.Identity, v.Occurrence)
		if err != nil || id != v.ID {
			t.Errorf("%s: DeriveID = %s, %v; want %s", v.Name, id, err, v.ID)
		}
	}
}

func identityOf(t *testing.T, v vector) []string {
	t.Helper()
	identity, err := deriveIdentity(t, v)
	if err != nil {
		t.Fatalf("%s: %v", v.Name, err)
	}
	return identity
}

func deriveIdentity(t *testing.T, v vector) ([]string, error) {
	t.Helper()
	in := func(key string) string { return string(v.Input[key]) }
	if v.keyed() {
		switch v.WriteType {
		case WriteCreate, WriteCreateProposal:
			return KeyedCreateIdentity(in("kind"), in("key"))
		case WriteThread:
			return KeyedThreadIdentity(in("key"))
		case WriteStep:
			return KeyedStepIdentity(in("tool"), in("key"))
		}
		t.Fatalf("vector %q names a key for a %q", v.Name, v.WriteType)
	}
	switch v.WriteType {
	case WriteCreate, WriteCreateProposal:
		return CreateIdentity(in("kind"), []byte(in("data_json")))
	case WriteEditProposal:
		return EditProposalIdentity(in("artifact_id"), in("path"), []byte(in("value_json")), v.Version)
	case WriteEdit:
		return EditIdentity(in("artifact_id"), in("path"))
	case WriteNotice, WriteMessage:
		return PostIdentity(in("thread_id"), in("text"))
	case WriteThread:
		return ThreadIdentity(in("title"))
	case WriteStep:
		return StepIdentity(in("tool"), []byte(in("args_json")))
	}
	t.Fatalf("vector %q has an unknown write type %q", v.Name, v.WriteType)
	return nil, nil
}

func TestInputsTheSidecarRefusesAreRefusedNamingItsField(t *testing.T) {
	for _, v := range loadRefusals(t) {
		t.Run(v.Name, func(t *testing.T) {
			identity, err := deriveIdentity(t, v)
			if err == nil {
				_, err = v.derive(identity, 0)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want an *Error naming %s", err, v.Field)
			}
			if e.Code != codes.InvalidArgument || e.Reason != "INVALID_ARGUMENT" || !e.Refused() {
				t.Errorf("got %s %s %s, want INVALID_ARGUMENT REFUSED", e.Code, e.Reason, e.Class)
			}
			if len(e.Violations) != 1 || e.Violations[0].Field != v.Field {
				t.Errorf("violations %v, want one naming %s", e.Violations, v.Field)
			}
		})
	}
}

func TestDerivedIDVectors(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			identity := identityOf(t, v)
			if !slices.Equal(identity, v.Identity) {
				t.Errorf("identity = %q, want %q", identity, v.Identity)
			}
			material, err := v.scheme().idMaterial(v.WriteType, string(v.RunID), string(v.Checkpoint), identity, v.Occurrence)
			if v.keyed() {
				material, err = v.scheme().keyedMaterial(v.WriteType, string(v.RunID), string(v.Checkpoint), identity)
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(material) != v.Material {
				t.Errorf("material = %s, want %s", material, v.Material)
			}
			id, err := v.derive(identity, v.Occurrence)
			if err != nil {
				t.Fatal(err)
			}
			if id != v.ID {
				t.Errorf("id = %s, want %s", id, v.ID)
			}
		})
	}
}

func TestNormalizePathRefusesWhatTheSidecarRefuses(t *testing.T) {
	for _, path := range []string{"", "status", "/items/-", "/a~2b", "/a~"} {
		if _, err := NormalizePath(path); err == nil {
			t.Errorf("NormalizePath(%q) succeeded, want an error", path)
		}
	}
	got, err := NormalizePath("/a~1b/~0")
	if err != nil || got != "/a~1b/~0" {
		t.Errorf("NormalizePath kept escapes as %q, %v", got, err)
	}
}
