package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// manifest is one document of a file under kubernetes/, decoded.
type manifest struct {
	file string
	kind string
	obj  any
}

// newObject is the k8s.io/api type of apiVersion and kind; a kind the
// example does not use is an error, so nothing goes unchecked.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + "/" + kind {
	case "v1/Namespace":
		return &corev1.Namespace{}, nil
	case "v1/Secret":
		return &corev1.Secret{}, nil
	case "v1/Service":
		return &corev1.Service{}, nil
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "apps/v1/StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, nil
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	}
	return nil, fmt.Errorf("apiVersion %q kind %q: not a type this test knows (add it to newObject)", apiVersion, kind)
}

// loadManifests decodes every document of every YAML file under dir
// strictly: an unknown or misspelt field, a duplicate key or a value of the
// wrong type fails.
func loadManifests(t *testing.T, dir string) []manifest {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", dir, err)
	}
	var out []manifest
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitYAML(body) {
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Errorf("%s document %d: %v", f, i+1, err)
				continue
			}
			obj, err := newObject(tm.APIVersion, tm.Kind)
			if err != nil {
				t.Errorf("%s document %d: %v", f, i+1, err)
				continue
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Errorf("%s document %d (%s): %v", f, i+1, tm.Kind, err)
				continue
			}
			out = append(out, manifest{file: filepath.Base(f), kind: tm.Kind, obj: obj})
		}
	}
	return out
}

// splitYAML cuts a multi-document YAML file at its "---" lines, dropping
// documents that hold only comments.
func splitYAML(body []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), body...), []byte("\n---")) {
		empty := true
		for _, line := range strings.Split(string(d), "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				empty = false
			}
		}
		if !empty {
			docs = append(docs, d)
		}
	}
	return docs
}

// The strict decoding itself: a misspelt field in a copy of a manifest is
// refused, so the test above would catch one in the real files.
func TestStrictDecodingRefusesAnUnknownField(t *testing.T) {
	body, err := os.ReadFile("kubernetes/kv.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(body, []byte("\n          restartPolicy: Always"), []byte("\n          restartPolicy: Always\n          restartPolicyy: Always"), 1)
	if bytes.Equal(bad, body) {
		t.Fatal("kv.yaml has no init container with restartPolicy: Always to misspell")
	}
	var docs int
	for _, doc := range splitYAML(bad) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatal(err)
		}
		obj, err := newObject(tm.APIVersion, tm.Kind)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			if !strings.Contains(err.Error(), "restartPolicyy") {
				t.Errorf("refused for another reason: %v", err)
			}
			docs++
		}
	}
	if docs != 1 {
		t.Errorf("%d documents refused, want the one with the misspelt field", docs)
	}
}

// Every manifest decodes strictly against k8s.io/api, and the example is
// wired as documented: the sidecar is a native sidecar (an init container
// with restartPolicy Always) next to the kv primary, probed on /healthz and
// /readyz, its token from the Secret, an emptyDir shared with the primary;
// the masters are a StatefulSet behind a headless Service, each
// advertising its own pod name, and every sidecar lists every master;
// PodDisruptionBudgets cover both; pods carry Prometheus scrape
// annotations; and every flag the containers pass is one the binaries
// take (checked against `shardfence serve -h`, `shardfence master -h` and
// `kv -h`, built from this checkout).
func TestKubernetesManifests(t *testing.T) {
	ms := loadManifests(t, "kubernetes")
	if t.Failed() {
		return
	}
	byName := map[string]manifest{}
	for _, m := range ms {
		name := m.obj.(metav1.Object).GetName()
		if ns := m.obj.(metav1.Object).GetNamespace(); m.kind != "Namespace" && ns != "shardfence" {
			t.Errorf("%s %s: namespace %q, want shardfence", m.kind, name, ns)
		}
		byName[m.kind+"/"+name] = m
	}
	need := func(key string) any {
		m, ok := byName[key]
		if !ok {
			t.Fatalf("no %s in kubernetes/", key)
		}
		return m.obj
	}
	secret := need("Secret/shardfence").(*corev1.Secret)
	masterSvc := need("Service/shardfence-master").(*corev1.Service)
	masters := need("StatefulSet/shardfence-master").(*appsv1.StatefulSet)
	kv := need("StatefulSet/kv").(*appsv1.StatefulSet)
	need("Service/kv")
	for _, pdb := range []string{"PodDisruptionBudget/shardfence-master", "PodDisruptionBudget/kv"} {
		p := need(pdb).(*policyv1.PodDisruptionBudget)
		sel := p.Spec.Selector.MatchLabels["app.kubernetes.io/name"]
		if sel != "shardfence-master" && sel != "kv" {
			t.Errorf("%s selects %v, none of the example's pods", pdb, p.Spec.Selector.MatchLabels)
		}
	}

	if masterSvc.Spec.ClusterIP != corev1.ClusterIPNone || masters.Spec.ServiceName != masterSvc.Name {
		t.Errorf("the masters need a headless Service named in the StatefulSet: clusterIP %q, serviceName %q", masterSvc.Spec.ClusterIP, masters.Spec.ServiceName)
	}
	replicas := int(*masters.Spec.Replicas)
	if replicas < 3 {
		t.Errorf("%d masters, want a master and two standbys", replicas)
	}
	mc := container(t, masters.Spec.Template.Spec.Containers, "master")
	if adv := flagValue(mc.Args, "advertise"); !strings.Contains(adv, "$(POD_NAME)."+masterSvc.Name) {
		t.Errorf("master --advertise %q: want each pod's own name under the headless Service", adv)
	}
	probes(t, "master", mc)
	secretRefs(t, secret, masters.Spec.Template.Spec, mc)

	pod := kv.Spec.Template.Spec
	var sc *corev1.Container
	for i := range pod.InitContainers {
		c := &pod.InitContainers[i]
		if len(c.Args) > 0 && c.Args[0] == "serve" {
			sc = c
		}
	}
	if sc == nil || sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Fatalf("the kv pod's sidecar must be an init container running serve with restartPolicy: Always")
	}
	kc := container(t, pod.Containers, "kv")
	probes(t, "sidecar", sc)
	if sc.StartupProbe == nil {
		t.Errorf("the sidecar has no startup probe: the primary would start before the sidecar serves")
	}
	secretRefs(t, secret, pod, sc)
	secretRefs(t, secret, pod, kc)
	var want []string
	for i := range replicas {
		want = append(want, fmt.Sprintf("http://%s-%d.%s:7500", masters.Name, i, masterSvc.Name))
	}
	if got := strings.Split(flagValue(sc.Args, "master"), ","); !slices.Equal(got, want) {
		t.Errorf("sidecar --master %q, want every master: %q", got, want)
	}
	if got := flagValue(sc.Args, "master-token-file"); !strings.HasSuffix(got, "/master-token") {
		t.Errorf("sidecar --master-token-file %q", got)
	}
	shared := ""
	for _, v := range pod.Volumes {
		if v.EmptyDir != nil {
			shared = v.Name
		}
	}
	if shared == "" || !mounts(sc, shared) || !mounts(kc, shared) {
		t.Errorf("the sidecar and the primary must share an emptyDir (%q)", shared)
	}
	for _, ss := range []*appsv1.StatefulSet{masters, kv} {
		a := ss.Spec.Template.Annotations
		port := a["prometheus.io/port"]
		if a["prometheus.io/scrape"] != "true" || port == "" || a["prometheus.io/path"] != "/metrics" {
			t.Errorf("%s pods: scrape annotations %v", ss.Name, a)
		}
		sec := ss.Spec.Template.Spec.SecurityContext
		if sec == nil || sec.RunAsNonRoot == nil || !*sec.RunAsNonRoot {
			t.Errorf("%s pods may run as root", ss.Name)
		}
	}

	// Every flag is one the binaries take.
	bin := buildBinaries(t)
	checkFlags(t, "master", mc.Args[1:], helpFlags(t, bin.shardfence, "master", "-h"))
	checkFlags(t, "serve", sc.Args[1:], helpFlags(t, bin.shardfence, "serve", "-h"))
	checkFlags(t, "kv", kc.Args, helpFlags(t, bin.kv, "-h"))
	if len(kc.Command) != 1 || kc.Command[0] != "/usr/local/bin/kv" {
		t.Errorf("kv command %q: the image holds the example at /usr/local/bin/kv", kc.Command)
	}
}

func container(t *testing.T, cs []corev1.Container, name string) *corev1.Container {
	t.Helper()
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

// probes checks the liveness probe is /healthz and the readiness probe
// /readyz, on the container's own port.
func probes(t *testing.T, who string, c *corev1.Container) {
	t.Helper()
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.LivenessProbe, "/healthz"}, {c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s: want an HTTP probe on %s, got %+v", who, p.path, p.probe)
			continue
		}
		port := p.probe.HTTPGet.Port.String()
		found := false
		for _, cp := range c.Ports {
			found = found || cp.Name == port || fmt.Sprint(cp.ContainerPort) == port
		}
		if !found {
			t.Errorf("%s: the %s probe's port %s is not the container's", who, p.path, port)
		}
	}
}

// secretRefs checks that every token file a flag names is mounted from a
// key the Secret has, and every secretKeyRef names one of its keys.
func secretRefs(t *testing.T, secret *corev1.Secret, pod corev1.PodSpec, c *corev1.Container) {
	t.Helper()
	for _, e := range c.Env {
		if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil {
			if _, ok := secret.StringData[r.SecretKeyRef.Key]; !ok || r.SecretKeyRef.Name != secret.Name {
				t.Errorf("%s: env %s from secret %s key %s, which the Secret does not hold", c.Name, e.Name, r.SecretKeyRef.Name, r.SecretKeyRef.Key)
			}
		}
	}
	files := map[string]bool{}
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == secret.Name {
				for _, it := range v.Secret.Items {
					if _, ok := secret.StringData[it.Key]; !ok {
						t.Errorf("%s: volume %s mounts key %s, which the Secret does not hold", c.Name, v.Name, it.Key)
					}
					files[filepath.Join(m.MountPath, it.Path)] = true
				}
			}
		}
	}
	n := 0
	for _, a := range c.Args {
		name, val, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if ok && strings.HasSuffix(name, "token-file") {
			n++
			if !files[val] {
				t.Errorf("%s: --%s=%s is not a file mounted from the Secret", c.Name, name, val)
			}
		}
	}
	if n == 0 {
		t.Errorf("%s: no token file from the Secret", c.Name)
	}
}

func mounts(c *corev1.Container, volume string) bool {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return true
		}
	}
	return false
}

// flagValue is the value of --name=VALUE in args.
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// checkFlags fails for an argument that is not --FLAG=VALUE (or a bare
// --FLAG) with a flag the command takes.
func checkFlags(t *testing.T, who string, args []string, known map[string]bool) {
	t.Helper()
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if !strings.HasPrefix(name, "--") || !known[strings.TrimPrefix(name, "--")] {
			t.Errorf("%s: argument %q is not a flag the command takes", who, a)
		}
	}
}
