package actonce_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	actonce "github.com/actonce/actonce/clients/go"
	"google.golang.org/grpc/codes"
)

// invalidSetting checks err is the client's *Error for a setting that cannot
// work, naming setting; its message.
func invalidSetting(t *testing.T, err error, setting string) string {
	t.Helper()
	var e *actonce.Error
	if !errors.As(err, &e) {
		t.Fatalf("%v (%T): not an *actonce.Error", err, err)
	}
	if e.Code != codes.InvalidArgument || e.Reason != "INVALID_ARGUMENT" || !e.Permanent() {
		t.Errorf("%v: want INVALID_ARGUMENT, PERMANENT", e)
	}
	if len(e.Violations) != 1 || e.Violations[0].Field != setting {
		t.Errorf("%v: want one violation of %s", e.Violations, setting)
	}
	return e.Message
}

func TestATargetWrittenAsAURLIsRefusedAtOnceSayingToWriteHostPort(t *testing.T) {
	t.Setenv(actonce.TargetEnv, "")
	for _, url := range []string{"http://127.0.0.1:50051", "https://127.0.0.1:50051/", "grpc://127.0.0.1:50051"} {
		_, err := actonce.New(url)
		message := invalidSetting(t, err, "target")
		if !strings.Contains(message, "HOST:PORT (127.0.0.1:50051)") || !strings.Contains(message, url) {
			t.Errorf("message %q: want what to write", message)
		}
	}
}

func TestTheTargetComesFromActonceTargetWhenNoneIsGiven(t *testing.T) {
	t.Setenv(actonce.TargetEnv, sidecar.Target)
	client, err := actonce.New("")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	attempt, err := client.Begin(context.Background(), actonce.Run{ID: "run-target-" + t.Name(), Rule: "triage"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := attempt.Create(context.Background(), "ticket", map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(actonce.TargetEnv, "http://127.0.0.1:1")
	_, err = actonce.New("")
	if !strings.Contains(invalidSetting(t, err, actonce.TargetEnv), "is a URL") {
		t.Errorf("%v: want the URL refused", err)
	}
	t.Setenv(actonce.TargetEnv, "")
	_, err = actonce.New("")
	if !strings.Contains(invalidSetting(t, err, actonce.TargetEnv), "HOST:PORT") {
		t.Errorf("%v: want what to write", err)
	}
}

func TestAMissingTokenFileIsAnInvalidSettingNamingWhereItWasGiven(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "api.token")
	t.Setenv(actonce.APITokenEnv, "")
	t.Setenv(actonce.APITokenFileEnv, "")
	_, err := actonce.New("127.0.0.1:1", actonce.WithAPITokenFile(missing))
	if message := invalidSetting(t, err, "WithAPITokenFile"); !strings.Contains(message, missing) {
		t.Errorf("message %q: want the file named", message)
	}
	t.Setenv(actonce.APITokenFileEnv, missing)
	_, err = actonce.New("127.0.0.1:1")
	if message := invalidSetting(t, err, actonce.APITokenFileEnv); !strings.Contains(message, "no such file") {
		t.Errorf("message %q: want why", message)
	}
}
