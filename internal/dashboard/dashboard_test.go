package dashboard_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/dashboard"
)

func TestLegend(t *testing.T) {
	labels := map[string]string{"policy": "api", "rule": "per-client", "quantile": "0.99"}
	for format, want := range map[string]string{
		"{{policy}}/{{rule}}":          "api/per-client",
		"p{{ quantile }}":              "p0.99",
		"{{policy}} {{missing}} (x)":   "api  (x)",
		"plain":                        "plain",
		"{{policy}} unterminated {{ru": "api unterminated {{ru",
	} {
		if got := dashboard.Legend(format, labels); got != want {
			t.Errorf("Legend(%q) = %q, want %q", format, got, want)
		}
	}
}

// Every query filters on the namespace variable, so selecting a namespace narrows each panel.
func TestQueriesFilterOnNamespace(t *testing.T) {
	for _, p := range dashboard.Panels() {
		if len(p.Queries) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Queries {
			if !strings.Contains(q.Expr, `namespace=~"`+dashboard.NamespaceVar+`"`) {
				t.Errorf("panel %q: query %q does not filter on %s", p.Title, q.Expr, dashboard.NamespaceVar)
			}
		}
	}
}

func TestGrafanaModel(t *testing.T) {
	a, err := dashboard.Grafana()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := dashboard.Grafana()
	if !bytes.Equal(a, b) {
		t.Fatal("two builds of the dashboard differ")
	}
	var model struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(a, &model); err != nil {
		t.Fatal(err)
	}
	panels := dashboard.Panels()
	if model.UID != dashboard.UID || len(model.Panels) != len(panels) {
		t.Fatalf("uid %q with %d panels, want %q with %d", model.UID, len(model.Panels), dashboard.UID, len(panels))
	}
	for i, p := range model.Panels {
		if p.Title != panels[i].Title || p.Type != "timeseries" || len(p.Targets) != len(panels[i].Queries) {
			t.Errorf("panel %d: %q (%s) with %d targets, want %q with %d", i, p.Title, p.Type, len(p.Targets), panels[i].Title, len(panels[i].Queries))
			continue
		}
		for j, tg := range p.Targets {
			if tg.Expr != panels[i].Queries[j].Expr || tg.RefID == "" {
				t.Errorf("panel %q target %d: %q (refId %q)", p.Title, j, tg.Expr, tg.RefID)
			}
		}
	}
	var vars []string
	for _, v := range model.Templating.List {
		vars = append(vars, v.Name)
	}
	if strings.Join(vars, ",") != "datasource,namespace" {
		t.Errorf("variables %v, want datasource and namespace", vars)
	}
}
