package config

import (
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// MarshalYAML makes yaml.Marshal write a Config with the keys Parse reads,
// in the order of the fields, secrets masked (see Secret), and durations
// the way they are usually written: "5m", "1h30m", "100ms" rather than
// "5m0s"; a list of durations on one line. An hmac mapping whose fields are
// all empty is left out, as are api and metrics without tokens. yaml.v3
// does the encoding; only the durations are rewritten.
func (c Config) MarshalYAML() (any, error) {
	type plain Config // without this method
	var n yaml.Node
	if err := n.Encode(plain(c)); err != nil {
		return nil, err
	}
	shortDurations(&n, reflect.TypeFor[Config]())
	return &n, nil
}

// shortDurations rewrites the durations in n, the encoding of a value of
// type t, with FormatDuration.
func shortDurations(n *yaml.Node, t reflect.Type) {
	switch {
	case t == durationType:
		if d, err := time.ParseDuration(n.Value); err == nil {
			n.Value = FormatDuration(d)
		}
	case t.Kind() == reflect.Slice:
		if t.Elem() == durationType {
			n.Style = yaml.FlowStyle // schedule: [1m, 5m, 30m]
		}
		for _, item := range n.Content {
			shortDurations(item, t.Elem())
		}
	case t.Kind() == reflect.Struct:
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			shortDurations(n.Content[i+1], fields[n.Content[i].Value].Type)
		}
	}
}

// FormatDuration formats d like time.Duration.String without the zero
// units it ends with: "5m" rather than "5m0s", "1h" rather than "1h0m0s",
// "1h30m". Parse reads it back to d.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
