package inbound

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSourceDefaults(t *testing.T) {
	t.Parallel()
	def := func(s Source) Source {
		s.Tolerance, s.MaxBody = DefaultTolerance, DefaultMaxBody
		return s
	}
	cases := []struct {
		name string
		in   Source
		want Source
	}{
		{"stripe", Source{Verify: "stripe"}, def(Source{Verify: "stripe", IDField: "id", TypeField: "type"})},
		{"standard", Source{Verify: "standard"}, def(Source{Verify: "standard", IDHeader: "webhook-id", TypeField: "type"})},
		{"github", Source{Verify: "github"},
			def(Source{Verify: "github", IDHeader: "X-GitHub-Delivery", TypeHeader: "X-GitHub-Event"})},
		{"hmac has no locations", Source{Verify: "hmac"}, def(Source{Verify: "hmac"})},
		{"none has no locations", Source{Verify: "none"}, def(Source{Verify: "none"})},
		{"a given ID header replaces both ID defaults", Source{Verify: "stripe", IDHeader: "X-Id"},
			def(Source{Verify: "stripe", IDHeader: "X-Id", TypeField: "type"})},
		{"a given type field replaces both type defaults", Source{Verify: "github", TypeField: "action"},
			def(Source{Verify: "github", IDHeader: "X-GitHub-Delivery", TypeField: "action"})},
		{"set values are kept", Source{Verify: "none", Tolerance: time.Second, MaxBody: 64, IDField: "id"},
			Source{Verify: "none", Tolerance: time.Second, MaxBody: 64, IDField: "id"}},
	}
	for _, c := range cases {
		if got := c.in.withDefaults(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

// TestSourceMasked prints a source every way a log line or an error could:
// no secret may show.
func TestSourceMasked(t *testing.T) {
	t.Parallel()
	sc := Source{Name: "stripe", Verify: "stripe", Secrets: []string{"whsec_firstSecret", "whsec_rotatedSecret"}}
	var out bytes.Buffer
	for _, v := range []any{sc, &sc, []Source{sc}} {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
			fmt.Fprintf(&out, verb+"\n", v)
		}
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(j)
		slog.New(slog.NewTextHandler(&out, nil)).Info("x", "v", v)
		slog.New(slog.NewJSONHandler(&out, nil)).Info("x", "v", v)
	}
	for _, s := range []string{"firstSecret", "rotatedSecret"} {
		if strings.Contains(out.String(), s) {
			t.Errorf("%q printed:\n%s", s, out.String())
		}
	}
	if !strings.Contains(out.String(), "[masked]") || !strings.Contains(out.String(), "stripe") {
		t.Errorf("source not printed:\n%s", out.String())
	}
	if sc.Secrets[0] != "whsec_firstSecret" {
		t.Errorf("masking changed the source: %v", sc.Secrets)
	}
}
