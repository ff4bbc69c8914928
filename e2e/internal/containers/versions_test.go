package containers

import (
	"os"
	"regexp"
	"testing"
)

// The default images are the tags `make test-images` builds: each carries
// the version of the binary `make tools` builds.
func TestDefaultImagesFollowTheMakefile(t *testing.T) {
	mk, err := os.ReadFile("../../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ variable, image, repo string }{
		{"MINIO_VERSION", DefaultMinIOImage, "shardfence/minio-test"},
		{"VERSITYGW_VERSION", DefaultVersityGWImage, "shardfence/versitygw-test"},
	} {
		m := regexp.MustCompile(`(?m)^` + c.variable + `\s*:=\s*(\S+)`).FindSubmatch(mk)
		if m == nil {
			t.Fatalf("Makefile sets no %s", c.variable)
		}
		if want := c.repo + ":" + string(m[1]); c.image != want {
			t.Errorf("default image %s; the Makefile's %s builds %s", c.image, c.variable, want)
		}
	}
}
