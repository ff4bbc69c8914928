// Package containers runs the S3 test servers (MinIO, versitygw) in Docker
// containers through testcontainers-go, so tests can stop, start and pause
// the store under a running sidecar, which a local process cannot model as
// faithfully.
//
// Images are built locally by `make test-images` (FROM scratch, the binary
// `make tools` built and the shared libraries it links) and never pulled:
// a missing image is an error naming that target. Containers share the
// host's network namespace and their servers listen on 127.0.0.1 only, so
// no packet leaves the loopback interface and a restarted container keeps
// its address. testcontainers' reaper (Ryuk) is off: every container is
// removed when its test ends, and `make test` removes any a killed test
// left behind.
package containers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// The images `make test-images` builds; the tags are the versions `make
// tools` builds (MINIO_VERSION and VERSITYGW_VERSION in the Makefile, which
// a test of this package keeps in step). The environment variables choose
// another image, e.g. a registry's MinIO image pulled beforehand.
const (
	DefaultMinIOImage     = "shardfence/minio-test:v0.0.0-20260212201848-7aac2a2c5b7c"
	DefaultVersityGWImage = "shardfence/versitygw-test:v1.8.0"
	MinIOImageEnv         = "SHARDFENCE_MINIO_IMAGE"
	VersityGWImageEnv     = "SHARDFENCE_VERSITYGW_IMAGE"
	// RunLabel labels every container with $SHARDFENCE_TEST_RUN, so the
	// run that started them can remove any a killed test left behind.
	RunLabel = "org.shardfence.test-run"
	runEnv   = "SHARDFENCE_TEST_RUN"
)

// ErrNoEngine means no Docker engine answers.
var ErrNoEngine = errors.New("no Docker engine answers")

// ErrImageMissing means the image is not in the engine; it is never pulled.
var ErrImageMissing = errors.New("image not in the local Docker engine (images are built locally, never pulled)")

// Configure sets what testcontainers-go reads from the environment once, at
// its first use, unless the caller set it: no reaper (its image cannot be
// pulled; tests remove their own containers) and 127.0.0.1 as the host
// every container is reached at (without it the readiness wait may look
// for the engine's gateway address). Call it from TestMain.
func Configure() {
	for k, v := range map[string]string{
		"TESTCONTAINERS_RYUK_DISABLED": "true",
		"TESTCONTAINERS_HOST_OVERRIDE": "127.0.0.1",
	} {
		if _, set := os.LookupEnv(k); !set {
			os.Setenv(k, v)
		}
	}
}

// Engine connects to the Docker engine testcontainers-go would use
// (DOCKER_HOST, else the default socket) and checks that it answers.
func Engine(ctx context.Context) (*testcontainers.DockerClient, error) {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err == nil {
		if _, err = cli.Ping(ctx, client.PingOptions{}); err != nil {
			cli.Close()
		}
	}
	if err != nil {
		at := os.Getenv("DOCKER_HOST")
		if at == "" {
			at = "the default socket"
		}
		return nil, fmt.Errorf("%w at %s (%v): `make test` starts one where dockerd is installed and it runs as root (`make tools` installs docker.io as root)", ErrNoEngine, at, err)
	}
	return cli, nil
}

// localOnly is an image substitutor that refuses any image the engine
// does not hold, so testcontainers-go never tries to pull one.
type localOnly struct {
	ctx    context.Context
	engine *testcontainers.DockerClient
	env    string // the variable that chose the image
	def    string // the image `make test-images` builds
}

func (l localOnly) Description() string { return "local images only, never pulled" }

func (l localOnly) Substitute(image string) (string, error) {
	_, err := l.engine.ImageInspect(l.ctx, image)
	switch {
	case err == nil:
		return image, nil
	case errdefs.IsNotFound(err) && image == l.def:
		return "", fmt.Errorf("%w: %s: run `make test-images` to build it", ErrImageMissing, image)
	case errdefs.IsNotFound(err):
		return "", fmt.Errorf("%w: %s (chosen by %s): pull or build it first, or unset %s for the image `make test-images` builds", ErrImageMissing, image, l.env, l.env)
	default:
		return "", fmt.Errorf("inspect image %s: %w", image, err)
	}
}

// Server is an S3 server in a container, listening on 127.0.0.1.
type Server struct {
	*testservers.S3Server
	Image  string
	ctr    *testcontainers.DockerContainer
	engine *testcontainers.DockerClient
}

// StartMinIO runs MinIO from $SHARDFENCE_MINIO_IMAGE (else
// DefaultMinIOImage) with a fresh bucket; the container is removed when t
// ends. Its data lives in the container's own filesystem, which a stop and
// start keep.
func StartMinIO(t testing.TB) (*Server, error) {
	t.Helper()
	ports, err := testservers.FreePorts(2)
	if err != nil {
		return nil, err
	}
	l := testservers.MinIOLaunch("/data", ports[0], ports[1])
	return start(t, MinIOImageEnv, DefaultMinIOImage, l, nil)
}

// StartVersityGW runs versitygw (posix backend on /data) from
// $SHARDFENCE_VERSITYGW_IMAGE (else DefaultVersityGWImage) with a fresh
// bucket; the container is removed when t ends.
func StartVersityGW(t testing.TB) (*Server, error) {
	t.Helper()
	ports, err := testservers.FreePorts(1)
	if err != nil {
		return nil, err
	}
	l := testservers.VersityGWLaunch("/data", ports[0])
	// Any answer below 500 means it serves: unauthenticated requests get 403.
	return start(t, VersityGWImageEnv, DefaultVersityGWImage, l, func(status int) bool { return status < 500 })
}

// start runs l in a container from the image $imageEnv names, else def.
func start(t testing.TB, imageEnv, def string, l testservers.S3Launch, ready func(int) bool) (*Server, error) {
	t.Helper()
	image := def
	if v := os.Getenv(imageEnv); v != "" {
		image = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	engine, err := Engine(ctx)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { engine.Close() })

	port := strings.TrimPrefix(l.Server.Host, "127.0.0.1:") + "/tcp"
	wt := wait.ForHTTP(l.ReadyPath).WithPort(port).WithStartupTimeout(2 * time.Minute)
	if ready != nil {
		wt = wt.WithStatusCodeMatcher(ready)
	}
	labels := map[string]string{}
	if run := os.Getenv(runEnv); run != "" {
		labels[RunLabel] = run
	}
	env := map[string]string{}
	for _, kv := range l.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	req := testcontainers.GenericContainerRequest{ContainerRequest: testcontainers.ContainerRequest{Image: image}}
	for _, opt := range []testcontainers.CustomizeRequestOption{
		testcontainers.WithImageSubstitutors(localOnly{ctx: ctx, engine: engine, env: imageEnv, def: def}),
		testcontainers.WithCmd(l.Args...),
		testcontainers.WithEnv(env),
		testcontainers.WithLabels(labels),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			// The host's network namespace: the server binds
			// 127.0.0.1 itself, nothing is published, and the
			// address survives a restart.
			hc.NetworkMode = "host"
		}),
		testcontainers.WithWaitStrategy(wt),
	} {
		if err := opt.Customize(&req); err != nil {
			return nil, err
		}
	}
	// A provider whose default network is the host's: testcontainers
	// neither creates a bridge network nor attaches the container to one
	// (a bridge would outlive the engine as a host interface).
	provider, err := testcontainers.NewDockerProvider(testcontainers.WithDefaultBridgeNetwork("host"), testcontainers.WithLogger(tclog.TestLogger(t)))
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrNoEngine, err)
	}
	defer provider.Close()
	c, err := provider.RunContainer(ctx, req.ContainerRequest)
	// Registered first, so it runs after the log dump below.
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		return nil, fmt.Errorf("%s container from %s: %w", l.Server.Kind, image, err)
	}
	ctr, ok := c.(*testcontainers.DockerContainer)
	if !ok {
		return nil, fmt.Errorf("%s container from %s: testcontainers returned a %T, not a Docker container", l.Server.Kind, image, c)
	}
	s := &Server{S3Server: l.Server, Image: image, ctr: ctr, engine: engine}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s container log (tail):\n%s", s.Kind, s.logTail(4000))
		}
	})
	if err := s.MakeBucket(); err != nil {
		return nil, err
	}
	t.Logf("%s in container %.12s from %s on %s", s.Kind, ctr.GetContainerID(), image, s.Host)
	return s, nil
}

// Stop stops the server (SIGTERM, then SIGKILL after 10s); its data stays.
func (s *Server) Stop(ctx context.Context) error {
	timeout := 10 * time.Second
	if err := s.ctr.Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("stop %s container: %w", s.Kind, err)
	}
	return nil
}

// Start starts a stopped server again and waits until it serves.
func (s *Server) Start(ctx context.Context) error {
	if err := s.ctr.Start(ctx); err != nil {
		return fmt.Errorf("start %s container: %w", s.Kind, err)
	}
	return nil
}

// Pause freezes every process of the container (`docker pause`): its
// socket still accepts connections, but nothing answers.
func (s *Server) Pause(ctx context.Context) error {
	if _, err := s.engine.ContainerPause(ctx, s.ctr.GetContainerID(), client.ContainerPauseOptions{}); err != nil {
		return fmt.Errorf("pause %s container: %w", s.Kind, err)
	}
	return nil
}

// Unpause lets a paused container run on.
func (s *Server) Unpause(ctx context.Context) error {
	if _, err := s.engine.ContainerUnpause(ctx, s.ctr.GetContainerID(), client.ContainerUnpauseOptions{}); err != nil {
		return fmt.Errorf("unpause %s container: %w", s.Kind, err)
	}
	return nil
}

// logTail is the end of the container's output.
func (s *Server) logTail(n int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := s.ctr.Logs(ctx)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	if err != nil {
		return string(b) + "\n(log cut short: " + err.Error() + ")"
	}
	return string(b)
}
