// Code generators for the Go stubs, pinned here and apart from the client
// module so that users of the client never pull them into their builds.
module github.com/actonce/actonce/clients/go/tools

go 1.25.0

tool (
	google.golang.org/grpc/cmd/protoc-gen-go-grpc
	google.golang.org/protobuf/cmd/protoc-gen-go
)

require (
	google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.2 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
