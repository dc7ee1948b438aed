package actonce

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gowebpki/jcs"
)

// SchemeVersion is the version of the derived-id scheme (docs/derived-ids.md)
// this package implements. The sidecar derives every write's id; deriving it
// here too lets an agent know an id before the write, and lets the tests hold
// every language to the same test vectors. An input the sidecar refuses is
// refused here with the *Error the sidecar answers (INVALID_ARGUMENT, naming
// the same field), before any id is derived from it.
//
// SchemeVersion is the newest version. A run keeps the version it began with,
// which the sidecar names when an attempt begins (Attempt.IDScheme). Version 2
// keys an edit proposal to its value too and puts a scoped attempt's scope
// into its ids; every other write keeps its version-1 id.
const SchemeVersion = 2

// IDScheme is what an attempt's ids depend on beyond the write itself: the
// scheme version the sidecar derives them with, and the attempt's scope.
type IDScheme struct {
	// Version is 1 or 2.
	Version int
	// Scope is the attempt's scope, empty for an unscoped attempt (version 2 only).
	Scope string
}

// WriteType is a kind of write; each has its own id space.
type WriteType string

const (
	WriteCreate         WriteType = "create"
	WriteCreateProposal WriteType = "create_proposal"
	WriteEdit           WriteType = "edit"
	WriteEditProposal   WriteType = "edit_proposal"
	WriteNotice         WriteType = "notice"
	WriteMessage        WriteType = "message"
	WriteThread         WriteType = "thread"
	WriteStep           WriteType = "step"
)

var prefixes = map[WriteType]string{
	WriteCreate:         "art",
	WriteCreateProposal: "prp",
	WriteEdit:           "edt",
	WriteEditProposal:   "prp",
	WriteNotice:         "msg",
	WriteMessage:        "msg",
	WriteThread:         "thr",
	WriteStep:           "stp",
}

// idChars keeps 130 bits of the digest.
const idChars = 26

// DeriveID is the id of the occurrence-th write of identity (counted from 0)
// in an unscoped attempt of run runID begun from checkpoint, under scheme
// version 1. IDScheme.DeriveID derives under any version and scope.
func DeriveID(writeType WriteType, runID, checkpoint string, identity []string, occurrence int) (string, error) {
	return IDScheme{Version: 1}.DeriveID(writeType, runID, checkpoint, identity, occurrence)
}

// DeriveID is the id of the occurrence-th write of identity (counted from 0)
// in an attempt of run runID begun from checkpoint, with this version and scope.
func (s IDScheme) DeriveID(writeType WriteType, runID, checkpoint string, identity []string, occurrence int) (string, error) {
	if err := checkName(runID, "run_id"); err != nil {
		return "", err
	}
	if s.Scope != "" {
		if err := checkName(s.Scope, "scope"); err != nil {
			return "", err
		}
	}
	if err := checkCheckpoint(checkpoint); err != nil {
		return "", err
	}
	material, err := s.idMaterial(writeType, runID, checkpoint, identity, occurrence)
	if err != nil {
		return "", err
	}
	digest := sha256.Sum256(material)
	encoded := strings.ToLower(base32.StdEncoding.EncodeToString(digest[:]))[:idChars]
	return prefixes[writeType] + "_" + encoded, nil
}

// idMaterial is the RFC 8785 form of a JSON array, so that no choice of
// strings can make two writes collide by concatenation. Version 2 has a
// material of its own only for a scoped attempt or an edit proposal; any other
// write keeps its version-1 material.
func (s IDScheme) idMaterial(writeType WriteType, runID, checkpoint string, identity []string, occurrence int) ([]byte, error) {
	if _, ok := prefixes[writeType]; !ok {
		return nil, fmt.Errorf("actonce: unknown write type %q", writeType)
	}
	if occurrence < 0 {
		return nil, fmt.Errorf("actonce: occurrence counts from 0, got %d", occurrence)
	}
	if s.Version != 1 && s.Version != 2 {
		return nil, fmt.Errorf("actonce: unknown id scheme version %d", s.Version)
	}
	if s.Version == 1 && s.Scope != "" {
		return nil, fmt.Errorf("actonce: a scope has no version-1 form")
	}
	fields := []any{"actonce/derived-id", 1, string(writeType), runID, checkpoint, identity, occurrence}
	if s.Version == 2 && (s.Scope != "" || writeType == WriteEditProposal) {
		fields = []any{"actonce/derived-id", 2, string(writeType), runID, s.Scope, checkpoint, identity, occurrence}
	}
	array, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(array)
}

// CreateIdentity identifies a create (or create proposal): kind and the
// digest of the data's canonical form.
func CreateIdentity(kind string, dataJSON []byte) ([]string, error) {
	if err := checkName(kind, "kind"); err != nil {
		return nil, err
	}
	digest, err := jsonDigest(dataJSON, "data_json")
	if err != nil {
		return nil, err
	}
	return []string{kind, digest}, nil
}

// EditIdentity identifies an edit (or edit proposal): artifact and normalized
// path, not the value.
func EditIdentity(artifactID, path string) ([]string, error) {
	if err := checkName(artifactID, "artifact_id"); err != nil {
		return nil, err
	}
	normalized, err := NormalizePath(path)
	if err != nil {
		return nil, err
	}
	return []string{artifactID, normalized}, nil
}

// EditProposalIdentity identifies an edit proposal: artifact and normalized
// path, and from scheme version 2 the digest of the value's canonical form (a
// draft for review: another value is another proposal).
func EditProposalIdentity(artifactID, path string, valueJSON []byte, version int) ([]string, error) {
	identity, err := EditIdentity(artifactID, path)
	if err != nil || version == 1 {
		return identity, err
	}
	digest, err := jsonDigest(valueJSON, "value_json")
	if err != nil {
		return nil, err
	}
	return append(identity, digest), nil
}

// PostIdentity identifies a notice or message: thread and the digest of the
// exact text bytes (no trimming, no Unicode normalization).
func PostIdentity(threadID, text string) ([]string, error) {
	if err := checkName(threadID, "thread_id"); err != nil {
		return nil, err
	}
	if err := checkText(text, "text", maxTextBytes); err != nil {
		return nil, err
	}
	return []string{threadID, textDigest([]byte(text))}, nil
}

// ThreadIdentity identifies a thread: its title.
func ThreadIdentity(title string) ([]string, error) {
	if err := checkName(title, "title"); err != nil {
		return nil, err
	}
	return []string{title}, nil
}

// StepIdentity identifies a step: tool and the digest of its canonical arguments.
func StepIdentity(tool string, argsJSON []byte) ([]string, error) {
	if err := checkName(tool, "tool"); err != nil {
		return nil, err
	}
	digest, err := jsonDigest(argsJSON, "args_json")
	if err != nil {
		return nil, err
	}
	return []string{tool, digest}, nil
}

// NormalizePath re-encodes an RFC 6901 JSON Pointer from its tokens, so that
// two spellings of one path key one edit. The root, a last token "-" (append)
// and a bad escape are refused, as the sidecar refuses them.
func NormalizePath(path string) (string, error) {
	tokens, err := pointerTokens(path)
	if err != nil {
		return "", err
	}
	for i, token := range tokens {
		tokens[i] = strings.NewReplacer("~", "~0", "/", "~1").Replace(token)
	}
	return "/" + strings.Join(tokens, "/"), nil
}

func jsonDigest(text []byte, field string) (string, error) {
	if err := checkJSON(text, field); err != nil {
		return "", err
	}
	canonical, err := jcs.Transform(text)
	if err != nil {
		return "", invalidInput(field, "cannot be canonicalized (RFC 8785): "+err.Error())
	}
	return textDigest(canonical), nil
}

func textDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
