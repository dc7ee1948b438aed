package actonce

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"
)

// The environment variables a client finds the sidecar's API token in when
// no option names it: a file (a Secret mount, the same variable the sidecar
// reads its --api-token-file from), else the token itself.
const (
	APITokenFileEnv = "ACTONCE_API_TOKEN_FILE"
	APITokenEnv     = "ACTONCE_API_TOKEN"
)

// tokenRereadInterval is how often a token file is read again, so that a
// Secret rotated in place is followed without a restart.
const tokenRereadInterval = time.Second

// WithAPIToken sends token as "authorization: Bearer <token>" with every call,
// for a sidecar started with --api-token-file.
func WithAPIToken(token string) Option {
	return func(o *options) { o.token, o.tokenFile = token, "" }
}

// WithAPITokenFile sends the token in path with every call. The file is read
// again at most once a second; one that cannot be read then keeps the token
// read last (a Secret in the middle of an update).
func WithAPITokenFile(path string) Option {
	return func(o *options) { o.token, o.tokenFile = "", path }
}

// apiToken is the call credential that carries the token; it needs no TLS,
// since the sidecar listens on loopback or a Unix socket in the agent's pod.
type apiToken struct {
	path   string
	mu     sync.Mutex
	value  string
	readAt time.Time
}

// resolveToken is the token the options name, else the environment's; nil
// for none.
// A token that cannot work (a file that cannot be read, an empty token) is an
// *Error (INVALID_ARGUMENT, Permanent) naming the option or variable it came from.
func resolveToken(o options) (*apiToken, error) {
	value, path := o.token, o.tokenFile
	setting := "WithAPIToken"
	if path != "" {
		setting = "WithAPITokenFile"
	}
	if value == "" && path == "" {
		setting, path = APITokenFileEnv, os.Getenv(APITokenFileEnv)
		if path == "" {
			setting, value = APITokenEnv, os.Getenv(APITokenEnv)
		}
	}
	switch {
	case path != "":
		value, err := readToken(path)
		if err != nil {
			return nil, invalidSetting(setting, err.Error())
		}
		return &apiToken{path: path, value: value, readAt: time.Now()}, nil
	case value != "":
		checked, err := checkToken(value, "the API token given")
		if err != nil {
			return nil, invalidSetting(setting, err.Error())
		}
		return &apiToken{value: checked}, nil
	}
	return nil, nil
}

func readToken(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("the API token file cannot be read: %w", err)
	}
	return checkToken(string(raw), "the API token file "+path)
}

func checkToken(token, source string) (string, error) {
	token = strings.TrimSpace(token)
	if token == "" {
		return "", fmt.Errorf("%s is empty", source)
	}
	for _, r := range token {
		// It travels as an HTTP/2 header value, which cannot hold these.
		if r > unicode.MaxASCII || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return "", errors.New(source + " holds whitespace, control or non-ASCII")
		}
	}
	return token, nil
}

func (t *apiToken) current() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.path != "" && time.Since(t.readAt) >= tokenRereadInterval {
		t.readAt = time.Now()
		if value, err := readToken(t.path); err == nil {
			t.value = value
		}
	}
	return t.value
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t *apiToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + t.current()}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (t *apiToken) RequireTransportSecurity() bool { return false }
