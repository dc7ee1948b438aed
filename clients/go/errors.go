package actonce

import (
	"fmt"
	"regexp"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
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
	// RequestID is the request_id a write was sent with ("" for a call that is
	// not a write). Repeating the write with it (WithRequestID), in the same
	// attempt, gets the first answer back instead of making it a second time.
	RequestID string
	status    *status.Status
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

// failureClasses are the classes the client knows, spelled exactly.
var failureClasses = map[string]FailureClass{
	string(Refused): Refused, string(Retryable): Retryable, string(Permanent): Permanent, string(Unknown): Unknown,
}

// grpc-go turns a status whose details' code is not the call's into
// INTERNAL with this message; the call's own code is read back from it.
var detailsMismatch = regexp.MustCompile(`^grpc-status-details-bin mismatch: grpc-status=(\w+), grpc-message="((?:[^"\\]|\\.)*)"`)

const (
	detailsKey     = "grpc-status-details-bin"
	errorInfoName  = "google.rpc.ErrorInfo"
	badRequestName = "google.rpc.BadRequest"
)

// fromRPC turns a failed call into an *Error; it never panics, whatever the
// status holds. One table decides, the same in every client
// (docs/status-cases.md):
//
//  1. details (the raw grpc-status-details-bin trailer) that do not decode,
//     whose code is not the call's, or whose ErrorInfo or BadRequest does not
//     decode: a malformed status; the code's name is the reason, the class
//     Unknown;
//  2. an ErrorInfo of domain "actonce": its reason, and its failure_class when
//     it is exactly one of the four classes, else Unknown;
//  3. no such ErrorInfo, a status from the transport: the code's name is the
//     reason; UNAVAILABLE (after the connection's own retries),
//     DEADLINE_EXCEEDED and a CANCELLED the caller did not cause are
//     Retryable, anything else Unknown.
//
// A CANCELLED the caller did not cause (callerCancelled: its own context was
// cancelled) is safe to retry: a sidecar never acts on a call it did not
// dispatch (a draining one answers SHUTTING_DOWN), and a write that may have
// landed stays bound to its request_id, so repeating it with that request_id
// gets the first answer, and a retried run finds it by its derived id.
func fromRPC(err error, trailer metadata.MD, requestID string, callerCancelled bool) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e := &Error{Code: st.Code(), Message: st.Message(), RequestID: requestID, status: st}
	if m := detailsMismatch.FindStringSubmatch(st.Message()); st.Code() == codes.Internal && m != nil {
		e.Code = codeNamed(m[1])
		if message, err := strconv.Unquote(`"` + m[2] + `"`); err == nil {
			e.Message = message
		}
		return e.malformed()
	}
	raw := trailer.Get(detailsKey)
	if len(raw) > 1 {
		return e.malformed()
	}
	if len(raw) == 1 {
		var details spb.Status
		if proto.Unmarshal([]byte(raw[0]), &details) != nil || codes.Code(details.GetCode()) != e.Code {
			return e.malformed()
		}
		for _, detail := range details.GetDetails() {
			switch detail.MessageName() {
			case errorInfoName:
				var info errdetails.ErrorInfo
				if proto.Unmarshal(detail.GetValue(), &info) != nil {
					return e.malformed()
				}
				if info.GetDomain() == Domain && e.Reason == "" {
					e.Reason = info.GetReason()
					e.Metadata = info.GetMetadata()
					e.Class = Unknown
					if class, known := failureClasses[info.GetMetadata()["failure_class"]]; known {
						e.Class = class
					}
				}
			case badRequestName:
				var bad errdetails.BadRequest
				if proto.Unmarshal(detail.GetValue(), &bad) != nil {
					return e.malformed()
				}
				for _, v := range bad.GetFieldViolations() {
					e.Violations = append(e.Violations, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
				}
			}
		}
	}
	if e.Reason == "" {
		e.Reason = codeName(e.Code)
		e.Class = transportClass(e.Code, callerCancelled)
	}
	return e
}

// malformed is e as a malformed status: the code's name, class Unknown.
func (e *Error) malformed() *Error {
	e.Reason, e.Class, e.Metadata, e.Violations = codeName(e.Code), Unknown, nil, nil
	return e
}

func codeName(c codes.Code) string { return code.Code_name[int32(c)] }

// codeNamed reads a codes.Code back from its String(), e.g. "Unavailable".
func codeNamed(name string) codes.Code {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == name {
			return c
		}
	}
	return codes.Unknown
}

func transportClass(c codes.Code, callerCancelled bool) FailureClass {
	switch {
	case c == codes.Unavailable, c == codes.DeadlineExceeded:
		return Retryable
	case c == codes.Canceled && !callerCancelled:
		return Retryable
	default:
		return Unknown
	}
}
