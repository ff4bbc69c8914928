// Package e2e tests shardfence against stores in Docker containers, where a
// test can stop, start and pause the store under running `shardfence serve`
// processes: the blob conformance suite on MinIO and versitygw containers,
// a store restarted and a store paused while a sidecar appends, and the
// multi-process zombie scenario on containerised MinIO.
//
// It is a Go module of its own (testcontainers-go and the Docker client stay
// out of the shardfence module's requirements). `make test` runs it with a
// Docker engine and the images `make test-images` builds; see
// docs/OPERATIONS.md, "Running the tests".
package e2e
