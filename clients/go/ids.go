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
// into its ids; every other write keeps its version-1 id. Version 3 adds the
// writes named by a key of the caller's (WithKey, DeriveKeyedID); every write
// without one keeps its version-2 id.
const SchemeVersion = 3

// keyedScheme is the first version whose runs take keys.
const keyedScheme = 3

// IDScheme is what an attempt's ids depend on beyond the write itself: the
// scheme version the sidecar derives them with, and the attempt's scope.
type IDScheme struct {
	// Version is 1, 2 or 3.
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
	if err := s.check(); err != nil {
		return nil, err
	}
	fields := []any{"actonce/derived-id", 1, string(writeType), runID, checkpoint, identity, occurrence}
	if s.Version >= 2 && (s.Scope != "" || writeType == WriteEditProposal) {
		fields = []any{"actonce/derived-id", 2, string(writeType), runID, s.Scope, checkpoint, identity, occurrence}
	}
	return canonicalArray(fields)
}

func (s IDScheme) check() error {
	if s.Version < 1 || s.Version > SchemeVersion {
		return fmt.Errorf("actonce: unknown id scheme version %d", s.Version)
	}
	if s.Version == 1 && s.Scope != "" {
		return fmt.Errorf("actonce: a scope has no version-1 form")
	}
	return nil
}

func canonicalArray(fields []any) ([]byte, error) {
	array, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(array)
}

// DeriveKeyedID is the id of the write named by identity, a keyed identity
// (KeyedCreateIdentity, KeyedThreadIdentity, KeyedStepIdentity), in an attempt
// of run runID begun from checkpoint. A keyed write has no occurrence: the key
// names one write, however often the attempt makes it. A run of version 1 or 2
// takes no key: refused as the sidecar refuses it, naming the field key.
func (s IDScheme) DeriveKeyedID(writeType WriteType, runID, checkpoint string, identity []string) (string, error) {
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
	if s.Version >= 1 && s.Version < keyedScheme {
		return "", invalidInput("key", fmt.Sprintf("run %s derives its ids under scheme %d, which has no keys: "+
			"make this write without a key, or begin the run anew on a sidecar with --id-scheme %d", runID, s.Version, keyedScheme))
	}
	material, err := s.keyedMaterial(writeType, runID, checkpoint, identity)
	if err != nil {
		return "", err
	}
	digest := sha256.Sum256(material)
	encoded := strings.ToLower(base32.StdEncoding.EncodeToString(digest[:]))[:idChars]
	return prefixes[writeType] + "_" + encoded, nil
}

// keyedMaterial is a keyed write's material, version 3's own: the scope is in
// it, scoped or not, and no occurrence is.
func (s IDScheme) keyedMaterial(writeType WriteType, runID, checkpoint string, identity []string) ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	switch {
	case s.Version < keyedScheme:
		return nil, fmt.Errorf("actonce: a run of id scheme version %d takes no key", s.Version)
	case writeType != WriteCreate && writeType != WriteCreateProposal && writeType != WriteThread && writeType != WriteStep:
		return nil, fmt.Errorf("actonce: a %s takes no key", writeType)
	}
	return canonicalArray([]any{"actonce/derived-id", keyedScheme, string(writeType), runID, s.Scope, checkpoint, identity})
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

// KeyedCreateIdentity identifies a create (or create proposal) named by a key
// of the caller's: kind and the key, not the data.
func KeyedCreateIdentity(kind, key string) ([]string, error) {
	if err := checkName(kind, "kind"); err != nil {
		return nil, err
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	return []string{kind, key}, nil
}

// KeyedThreadIdentity identifies a thread named by a key: the key, not the title.
func KeyedThreadIdentity(key string) ([]string, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	return []string{key}, nil
}

// KeyedStepIdentity identifies a step named by a key: tool and the key, not
// the arguments.
func KeyedStepIdentity(tool, key string) ([]string, error) {
	if err := checkName(tool, "tool"); err != nil {
		return nil, err
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	return []string{tool, key}, nil
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
