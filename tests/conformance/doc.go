// Package conformance drives a real in-process saltbush with real clients:
// the unmodified AWS SDK for Go v2, raw HTTP for wire details the SDK hides,
// gRPC, and the AWS CLI. Nothing here is mocked.
package conformance
