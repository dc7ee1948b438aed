package actonce

import (
	"os"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TargetEnv is where New finds the sidecar when no target is given: the
// deploy manifests set it for the agent's container.
const TargetEnv = "ACTONCE_TARGET"

// grpcSchemes are the name resolvers gRPC knows: a target with another
// scheme ("http://...") is a URL, which gRPC would take whole for a host name
// and answer UNAVAILABLE for ever.
var grpcSchemes = map[string]bool{
	"dns": true, "unix": true, "unix-abstract": true, "ipv4": true, "ipv6": true,
	"vsock": true, "xds": true, "passthrough": true,
}

// invalidSetting is the error for a setting of the client that cannot work
// (its target, its API token file): INVALID_ARGUMENT and Permanent, since a
// retried run would meet it again. setting names the option or the
// environment variable it came from.
func invalidSetting(setting, description string) *Error {
	message := setting + ": " + description
	return &Error{
		Code: codes.InvalidArgument, Message: message, Reason: "INVALID_ARGUMENT", Class: Permanent,
		Violations: []FieldViolation{{Field: setting, Description: description}},
		status:     status.New(codes.InvalidArgument, message),
	}
}

// resolveTarget is target when given, else $ACTONCE_TARGET; a URL or nothing
// is an invalidSetting saying what to write.
func resolveTarget(target string) (string, error) {
	setting := "target"
	if target == "" {
		setting, target = TargetEnv, os.Getenv(TargetEnv)
		if target == "" {
			return "", invalidSetting(TargetEnv, "no target was given and it is not set: "+
				"give the sidecar's HOST:PORT, as its --listen says (127.0.0.1:50051 by default)")
		}
	}
	if scheme, rest, found := strings.Cut(target, "://"); found && !grpcSchemes[strings.ToLower(scheme)] {
		hostPort, _, _ := strings.Cut(rest, "/")
		if hostPort == "" {
			hostPort = "HOST:PORT"
		}
		return "", invalidSetting(setting, "\""+target+"\" is a URL, not a gRPC target: write "+
			"HOST:PORT ("+hostPort+"), with no scheme, or unix:///path for a socket")
	}
	return target, nil
}
