package testservers

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// MinIOImage is the MinIO image used when a Docker engine is reachable; it
// must be new enough to enforce If-None-Match and If-Match on PUT.
// SHARDFENCE_MINIO_IMAGE overrides it.
const MinIOImage = "minio/minio:RELEASE.2025-04-22T22-12-26Z"

// startMinIOContainer runs MinIO through testcontainers-go; the container is
// removed when t ends.
func startMinIOContainer(t testing.TB) (*S3Server, error) {
	t.Helper()
	image := MinIOImage
	if v := os.Getenv("SHARDFENCE_MINIO_IMAGE"); v != "" {
		image = v
	}
	s := &S3Server{Kind: "minio", AccessKey: "minio-" + randomHex(6), SecretKey: randomHex(16), Bucket: "shardfence-test", Region: "us-east-1"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ctr, err := testcontainers.Run(ctx, image,
		testcontainers.WithEnv(map[string]string{"MINIO_ROOT_USER": s.AccessKey, "MINIO_ROOT_PASSWORD": s.SecretKey, "MINIO_BROWSER": "off"}),
		testcontainers.WithCmd("server", "/data", "--address", ":9000"),
		testcontainers.WithExposedPorts("9000/tcp"),
		testcontainers.WithWaitStrategy(wait.ForHTTP("/minio/health/ready").WithPort("9000/tcp").WithStartupTimeout(2*time.Minute)),
	)
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		return nil, fmt.Errorf("minio container %s: %w", image, err)
	}
	if s.Host, err = ctr.PortEndpoint(ctx, "9000/tcp", ""); err != nil {
		return nil, fmt.Errorf("minio container %s: mapped port: %w", image, err)
	}
	if err := s.makeBucket(); err != nil {
		return nil, err
	}
	return s, nil
}
