package actonce

import (
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the ErrorInfo domain of the sidecar's errors.
const Domain = "actonce"

// FailureClass says what the caller does with an error.
type FailureClass string

const (
	// Refused: the call was wrong; hand the error to the model, which can
	// correct the call. From a function action, fail the attempt.
	Refused FailureClass = "REFUSED"
	// Retryable: fail the attempt; the run is retried, and derived ids make
	// the retry safe.
	Retryable FailureClass = "RETRYABLE"
	// Permanent: the run fails; retrying cannot help.
	Permanent FailureClass = "PERMANENT"
	// Unknown: the outcome is not known (an audit that could not be made
	// durable, a step in doubt); never retry automatically.
	Unknown FailureClass = "UNKNOWN"
)

// FieldViolation is one bad field of a request.
type FieldViolation struct {
	Field       string
	Description string
}

// Error is every error the sidecar answers with: its status code, and the
// reason and failure class from its google.rpc.ErrorInfo.
type Error struct {
	Code       codes.Code
	Message    string
	Reason     string
	Class      FailureClass
	Metadata   map[string]string
	Violations []FieldViolation
	status     *status.Status
}

func (e *Error) Error() string {
	return fmt.Sprintf("actonce: %s (%s, %s): %s", e.Reason, e.Class, e.Code, e.Message)
}

// GRPCStatus lets status.FromError and status.Code see the original status.
func (e *Error) GRPCStatus() *status.Status { return e.status }

// Refused reports that the call was wrong: hand the error to the model.
func (e *Error) Refused() bool { return e.Class == Refused }

// Retryable reports that the attempt should fail and the run be retried.
func (e *Error) Retryable() bool { return e.Class == Retryable }

// Permanent reports that the run fails with no retry.
func (e *Error) Permanent() bool { return e.Class == Permanent }

// Unknown reports that the outcome is not known: never retry automatically.
func (e *Error) Unknown() bool { return e.Class == Unknown }

// fromRPC turns a gRPC error into an *Error. A status with no ErrorInfo did
// not come from the sidecar's rules but from the transport: UNAVAILABLE
// (after the channel's own retries) and DEADLINE_EXCEEDED are retryable,
// since derived ids make a retried run safe; anything else is unknown.
func fromRPC(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e := &Error{Code: st.Code(), Message: st.Message(), Reason: code.Code_name[int32(st.Code())], status: st}
	for _, detail := range st.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() != Domain {
				continue
			}
			e.Reason = d.GetReason()
			e.Metadata = d.GetMetadata()
			e.Class = FailureClass(d.GetMetadata()["failure_class"])
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				e.Violations = append(e.Violations, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		}
	}
	if e.Class == "" {
		e.Class = transportClass(st.Code())
	}
	return e
}

func transportClass(code codes.Code) FailureClass {
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded:
		return Retryable
	default:
		return Unknown
	}
}
