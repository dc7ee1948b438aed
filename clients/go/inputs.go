package actonce

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The sidecar's checks of a write's inputs, made before an id is derived
// locally: an id derived from an input the sidecar refuses would name nothing.
// Each check refuses what the sidecar refuses with the same error, an *Error
// with the sidecar's INVALID_ARGUMENT code, reason and class and one field
// violation naming the same field. docs/derived-id-vectors.json lists the
// refused inputs ("refusals") that the tests hold these checks to.

const (
	maxJSONBytes = 1 << 20  // UTF-8 bytes of a *_json field
	maxJSONDepth = 64       // nested arrays and objects
	maxTextBytes = 64 << 10 // a notice's or message's text, a checkpoint
	maxNameBytes = 512      // kind, title, ids, tool names
	maxPathBytes = maxNameBytes * 8
	maxKeyBytes  = 255 // a key the caller chooses
	safeInteger  = 1<<53 - 1
)

// invalidInput is the error the sidecar answers for a bad field.
func invalidInput(field, description string) *Error {
	message := field + ": " + description
	return &Error{
		Code: codes.InvalidArgument, Message: message, Reason: "INVALID_ARGUMENT", Class: Refused,
		Violations: []FieldViolation{{Field: field, Description: description}},
		status:     status.New(codes.InvalidArgument, message),
	}
}

func checkText(value, field string, limit int) error {
	if value == "" {
		return invalidInput(field, "must not be empty")
	}
	if strings.ContainsRune(value, 0) {
		return invalidInput(field, "must not contain a NUL character")
	}
	if !utf8.ValidString(value) {
		return invalidInput(field, "must be valid UTF-8")
	}
	if len(value) > limit {
		return invalidInput(field, fmt.Sprintf("is %d bytes; the limit is %d", len(value), limit))
	}
	return nil
}

// checkName checks a kind, title, id or tool name.
func checkName(value, field string) error { return checkText(value, field, maxNameBytes) }

// checkKey checks a key the caller chose: 1 to 255 bytes of UTF-8, no NUL.
func checkKey(key string) error { return checkText(key, "key", maxKeyBytes) }

// checkCheckpoint: a checkpoint may be empty; it has no NUL and is within 64 KiB.
func checkCheckpoint(value string) error {
	if len(value) > maxTextBytes {
		return invalidInput("checkpoint", fmt.Sprintf("is longer than %d bytes", maxTextBytes))
	}
	if strings.ContainsRune(value, 0) {
		return invalidInput("checkpoint", "must not contain a NUL character")
	}
	if !utf8.ValidString(value) {
		return invalidInput("checkpoint", "must be valid UTF-8")
	}
	return nil
}

// pointerTokens splits an RFC 6901 pointer into its tokens, refusing what the
// sidecar refuses: the root, no leading '/', '~' not followed by 0 or 1, a
// last token "-" (an append), more than 4096 bytes.
func pointerTokens(path string) ([]string, error) {
	if len(path) > maxPathBytes {
		return nil, invalidInput("path", fmt.Sprintf("is longer than %d bytes", maxPathBytes))
	}
	if path == "" {
		return nil, invalidInput("path", "must not be the root: an edit sets one value inside")
	}
	if !utf8.ValidString(path) {
		return nil, invalidInput("path", "must be valid UTF-8")
	}
	if !strings.HasPrefix(path, "/") {
		return nil, invalidInput("path", "is not a JSON Pointer (RFC 6901): it must start with '/'")
	}
	tokens := strings.Split(path[1:], "/")
	for i, token := range tokens {
		var b strings.Builder
		for j := 0; j < len(token); j++ {
			if token[j] != '~' {
				b.WriteByte(token[j])
				continue
			}
			if j+1 == len(token) || (token[j+1] != '0' && token[j+1] != '1') {
				return nil, invalidInput("path", "is not a JSON Pointer: '~' must be followed by 0 or 1")
			}
			if token[j+1] == '0' {
				b.WriteByte('~')
			} else {
				b.WriteByte('/')
			}
			j++
		}
		tokens[i] = b.String()
	}
	if tokens[len(tokens)-1] == "-" {
		return nil, invalidInput("path", "must not end in '-': appends are refused, name each entry")
	}
	return tokens, nil
}

// checkJSON refuses a *_json field the sidecar refuses: empty, over 1 MiB, not
// strict JSON (RFC 8259), nested deeper than 64, with a duplicate key or a lone
// surrogate, a number beyond a double, or an integer beyond 2^53 other than the
// digits RFC 8785 writes for a double (those are that double, as the sidecar
// reads them; any other would be rounded).
func checkJSON(text []byte, field string) error {
	if len(text) == 0 {
		return invalidInput(field, "must be JSON text, got an empty string")
	}
	if len(text) > maxJSONBytes {
		return invalidInput(field, fmt.Sprintf("is %d bytes; the limit is %d", len(text), maxJSONBytes))
	}
	if !utf8.Valid(text) {
		return invalidInput(field, "is not valid JSON: it is not UTF-8")
	}
	s := jsonScanner{text: string(text)}
	s.space()
	err := s.value(1)
	if err == nil {
		s.space()
		if s.pos != len(s.text) {
			err = s.fail("extra data")
		}
	}
	if err != nil {
		return invalidInput(field, err.Error())
	}
	return nil
}

type jsonScanner struct {
	text string
	pos  int
}

func (s *jsonScanner) fail(what string) error {
	return fmt.Errorf("is not valid JSON: %s at offset %d", what, s.pos)
}

func (s *jsonScanner) space() {
	for s.pos < len(s.text) && strings.IndexByte(" \t\n\r", s.text[s.pos]) >= 0 {
		s.pos++
	}
}

func (s *jsonScanner) value(depth int) error {
	if s.pos == len(s.text) {
		return s.fail("expecting a value")
	}
	switch c := s.text[s.pos]; {
	case c == '{' || c == '[':
		if depth > maxJSONDepth {
			return fmt.Errorf("nests deeper than %d levels", maxJSONDepth)
		}
		return s.container(depth)
	case c == '"':
		_, err := s.str()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	}
	for _, literal := range []string{"true", "false", "null"} {
		if strings.HasPrefix(s.text[s.pos:], literal) {
			s.pos += len(literal)
			return nil
		}
	}
	return s.fail("expecting a value")
}

func (s *jsonScanner) container(depth int) error {
	object := s.text[s.pos] == '{'
	closing := byte(']')
	if object {
		closing = '}'
	}
	s.pos++
	s.space()
	if s.pos < len(s.text) && s.text[s.pos] == closing {
		s.pos++
		return nil
	}
	keys := map[string]bool{}
	for {
		if object {
			if s.pos == len(s.text) || s.text[s.pos] != '"' {
				return s.fail("expecting a key")
			}
			key, err := s.str()
			if err != nil {
				return err
			}
			if keys[key] {
				return fmt.Errorf("is not valid JSON: duplicate key %q", key)
			}
			keys[key] = true
			s.space()
			if s.pos == len(s.text) || s.text[s.pos] != ':' {
				return s.fail("expecting ':'")
			}
			s.pos++
			s.space()
		}
		if err := s.value(depth + 1); err != nil {
			return err
		}
		s.space()
		if s.pos == len(s.text) {
			return s.fail("unterminated container")
		}
		switch s.text[s.pos] {
		case ',':
			s.pos++
			s.space()
		case closing:
			s.pos++
			return nil
		default:
			return s.fail("expecting ',' or a closing bracket")
		}
	}
}

// str reads a string and returns it decoded, refusing control characters,
// bad escapes and lone surrogates.
func (s *jsonScanner) str() (string, error) {
	s.pos++ // the opening quote
	var units []uint16
	for {
		if s.pos == len(s.text) {
			return "", s.fail("unterminated string")
		}
		c := s.text[s.pos]
		switch {
		case c == '"':
			s.pos++
			for i := 0; i < len(units); i++ {
				switch u := rune(units[i]); {
				case utf16.IsSurrogate(u) && u < 0xdc00 && i+1 < len(units) && units[i+1] >= 0xdc00 && units[i+1] <= 0xdfff:
					i++
				case utf16.IsSurrogate(u):
					return "", fmt.Errorf("cannot be canonicalized (RFC 8785): a lone surrogate \\u%04x", u)
				}
			}
			return string(utf16.Decode(units)), nil
		case c < 0x20:
			return "", s.fail("a control character in a string")
		case c == '\\':
			if s.pos+1 == len(s.text) {
				return "", s.fail("unterminated string")
			}
			escaped := s.text[s.pos+1]
			if escaped == 'u' {
				if s.pos+6 > len(s.text) {
					return "", s.fail("a bad \\u escape")
				}
				unit, err := strconv.ParseUint(s.text[s.pos+2:s.pos+6], 16, 16)
				if err != nil || strings.ContainsAny(s.text[s.pos+2:s.pos+6], "+-_xX") {
					return "", s.fail("a bad \\u escape")
				}
				units = append(units, uint16(unit))
				s.pos += 6
				continue
			}
			decoded, ok := map[byte]uint16{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}[escaped]
			if !ok {
				return "", s.fail("a bad escape")
			}
			units = append(units, decoded)
			s.pos += 2
		default:
			r, size := utf8.DecodeRuneInString(s.text[s.pos:])
			units = utf16.AppendRune(units, r)
			s.pos += size
		}
	}
}

func (s *jsonScanner) number() error {
	start := s.pos
	if s.text[s.pos] == '-' {
		s.pos++
	}
	digits := func() int {
		n := 0
		for s.pos < len(s.text) && s.text[s.pos] >= '0' && s.text[s.pos] <= '9' {
			s.pos++
			n++
		}
		return n
	}
	intStart := s.pos
	if n := digits(); n == 0 {
		return s.fail("expecting a digit")
	} else if n > 1 && s.text[intStart] == '0' {
		return s.fail("a leading zero")
	}
	integral := true
	if s.pos < len(s.text) && s.text[s.pos] == '.' {
		s.pos++
		integral = false
		if digits() == 0 {
			return s.fail("expecting a digit")
		}
	}
	if s.pos < len(s.text) && (s.text[s.pos] == 'e' || s.text[s.pos] == 'E') {
		s.pos++
		integral = false
		if s.pos < len(s.text) && (s.text[s.pos] == '+' || s.text[s.pos] == '-') {
			s.pos++
		}
		if digits() == 0 {
			return s.fail("expecting a digit")
		}
	}
	token := s.text[start:s.pos]
	double, _ := strconv.ParseFloat(token, 64)
	if math.IsInf(double, 0) {
		return fmt.Errorf("cannot be canonicalized (RFC 8785): %s is beyond a double", token)
	}
	if integral {
		exact, _ := new(big.Int).SetString(token, 10)
		if exact.CmpAbs(big.NewInt(safeInteger)) > 0 &&
			(math.Abs(double) >= 1e21 || strconv.FormatFloat(double, 'f', -1, 64) != token) {
			return fmt.Errorf("cannot be canonicalized (RFC 8785): %s exceeds the safe integers and is no double's form", token)
		}
	}
	return nil
}
