package deploy

import (
	"encoding/json"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// promtool is the promtool `make tools` builds, or the end of the test
// (a failure under CI=true, a skip elsewhere).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := testservers.Tool("promtool")
	if err != nil {
		testservers.Unavailable(t, "promtool", err)
	}
	return p
}

// The rules load (`promtool check rules`), every alert fires on the series
// that should raise it and stays quiet on the ones that should not
// (`promtool test rules`, prometheus/rules_test.yml), and the scrape
// configuration that loads them is valid (`promtool check config`).
func TestPrometheusRules(t *testing.T) {
	pt := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "rules.yml"},
		{"test", "rules", "rules_test.yml"},
		{"check", "config", "--syntax-only", "prometheus.yml"},
	} {
		cmd := exec.Command(pt, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Every alert has a unit test that expects it to fire.
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(mustRead(t, "prometheus/rules_test.yml"), &tests); err != nil {
		t.Fatal(err)
	}
	fired := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fired[a.Alertname] = true
			}
		}
	}
	for _, r := range loadRules(t) {
		if r.Alert != "" && !fired[r.Alert] {
			t.Errorf("alert %s has no test in rules_test.yml that expects it to fire", r.Alert)
		}
	}
}

type rule struct {
	Record string `yaml:"record"`
	Alert  string `yaml:"alert"`
	Expr   string `yaml:"expr"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(mustRead(t, "prometheus/rules.yml"), &f); err != nil {
		t.Fatal(err)
	}
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatal("no rules in prometheus/rules.yml")
	}
	return out
}

// dashboard is the part of the Grafana JSON the tests read.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(mustRead(t, "grafana/shardfence.json"), &d); err != nil {
		t.Fatalf("grafana/shardfence.json: %v", err)
	}
	return d
}

// The dashboard is importable as it is: unique panel ids, every panel on
// the 24-column grid and on the data source variable, every query panel
// with a PromQL expression.
func TestGrafanaDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard uid %q title %q with %d panels", d.UID, d.Title, len(d.Panels))
	}
	ids := map[int]bool{}
	queries := 0
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W < 1 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H < 1 {
			t.Errorf("panel %q: gridPos %+v is off the 24-column grid", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q is not on the ${datasource} variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			if q.RefID == "" || len(metricNames(q.Expr)) == 0 {
				t.Errorf("panel %q: query %q names no shardfence metric", p.Title, q.Expr)
			}
		}
	}
	if queries < 20 {
		t.Errorf("%d queries: the dashboard lost its panels", queries)
	}
}

var (
	metricRE    = regexp.MustCompile(`\bshardfence_[a-z0-9_]+`)
	recordingRE = regexp.MustCompile(`\bshardfence:[a-z0-9_:]+`)
)

// metricNames are the shardfence metrics an expression names.
func metricNames(expr string) []string {
	return slices.Compact(slices.Sorted(slices.Values(metricRE.FindAllString(expr, -1))))
}

// namedMetrics is every metric a rule or a panel names, with where it is
// named; recording rules a panel or alert uses must be defined.
func namedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	where := map[string][]string{}
	recorded := map[string]bool{}
	rules := loadRules(t)
	for _, r := range rules {
		if r.Record != "" {
			recorded[r.Record] = true
		}
	}
	use := func(what, expr string) {
		for _, m := range metricNames(expr) {
			where[m] = append(where[m], what)
		}
		for _, r := range recordingRE.FindAllString(expr, -1) {
			if !recorded[r] {
				t.Errorf("%s uses the recording rule %s, which rules.yml does not define", what, r)
			}
		}
	}
	for _, r := range rules {
		use("rule "+r.Record+r.Alert, r.Expr)
	}
	d := loadDashboard(t)
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			use("panel "+p.Title, q.Expr)
		}
	}
	for _, v := range d.Templating.List {
		use("variable "+v.Name, v.Definition)
	}
	return where
}

// exportedNames are the sample and family names of a Prometheus text
// exposition.
func exportedNames(body string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			names[strings.Fields(rest)[0]] = true
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		names[name] = true
	}
	return names
}
