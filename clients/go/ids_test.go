package actonce

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

type vector struct {
	Name       string            `json:"name"`
	WriteType  WriteType         `json:"write_type"`
	RunID      string            `json:"run_id"`
	Checkpoint string            `json:"checkpoint"`
	Input      map[string]string `json:"input"`
	Identity   []string          `json:"identity"`
	Occurrence int               `json:"occurrence"`
	Material   string            `json:"material"`
	ID         string            `json:"id"`
}

func loadVectors(t *testing.T) []vector {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "derived-id-vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		SchemeVersion int      `json:"scheme_version"`
		Vectors       []vector `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if file.SchemeVersion != SchemeVersion {
		t.Fatalf("vectors are for scheme %d, this package implements %d", file.SchemeVersion, SchemeVersion)
	}
	if len(file.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	return file.Vectors
}

func identityOf(t *testing.T, v vector) []string {
	t.Helper()
	var identity []string
	var err error
	switch v.WriteType {
	case WriteCreate, WriteCreateProposal:
		identity, err = CreateIdentity(v.Input["kind"], []byte(v.Input["data_json"]))
	case WriteEdit, WriteEditProposal:
		identity, err = EditIdentity(v.Input["artifact_id"], v.Input["path"])
	case WriteNotice, WriteMessage:
		identity = PostIdentity(v.Input["thread_id"], v.Input["text"])
	case WriteThread:
		identity = ThreadIdentity(v.Input["title"])
	case WriteStep:
		identity, err = StepIdentity(v.Input["tool"], []byte(v.Input["args_json"]))
	default:
		t.Fatalf("vector %q has an unknown write type %q", v.Name, v.WriteType)
	}
	if err != nil {
		t.Fatalf("%s: %v", v.Name, err)
	}
	return identity
}

func TestDerivedIDVectors(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			identity := identityOf(t, v)
			if !slices.Equal(identity, v.Identity) {
				t.Errorf("identity = %q, want %q", identity, v.Identity)
			}
			material, err := idMaterial(v.WriteType, v.RunID, v.Checkpoint, identity, v.Occurrence)
			if err != nil {
				t.Fatal(err)
			}
			if string(material) != v.Material {
				t.Errorf("material = %s, want %s", material, v.Material)
			}
			id, err := DeriveID(v.WriteType, v.RunID, v.Checkpoint, identity, v.Occurrence)
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
