package config

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// MarshalYAML makes yaml.Marshal write a Config with the keys Parse reads,
// in the order of the fields, and durations the way they are usually
// written: "5m", "1h30m", "100ms" rather than "5m0s". Empty lists and maps
// are written as [] and {}; a nested mapping whose fields are all zero
// (the hmac of a source that does not use it) is left out. Parse reads the
// output back to an equal Config (but for nil versus empty lists and maps).
// Secrets are masked (see Secret).
func (c Config) MarshalYAML() (any, error) {
	return yamlNode(reflect.ValueOf(c))
}

// yamlNode builds the YAML node of v, following yaml tags as Parse does.
func yamlNode(v reflect.Value) (*yaml.Node, error) {
	if v.Type() == durationType {
		return scalarNode(FormatDuration(time.Duration(v.Int())))
	}
	if _, ok := v.Interface().(yaml.Marshaler); ok && v.Type() != reflect.TypeFor[Config]() {
		return scalarNode(v.Interface()) // masks itself
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
		}
		return yamlNode(v.Elem())
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			if fv := v.Field(i); fv.Kind() == reflect.Struct && fv.IsZero() {
				// Left out, as a file would: Parse refuses an hmac
				// mapping on a source whose verify is not hmac.
				continue
			}
			val, err := yamlNode(v.Field(i))
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name}, val)
		}
		return n, nil
	case reflect.Slice, reflect.Array:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if v.Type().Elem() == durationType {
			n.Style = yaml.FlowStyle // schedule: [1m, 5m, 30m]
		}
		for i := 0; i < v.Len(); i++ {
			item, err := yamlNode(v.Index(i))
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, item)
		}
		return n, nil
	case reflect.Map:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int {
			return cmp.Compare(fmt.Sprint(a.Interface()), fmt.Sprint(b.Interface()))
		})
		for _, k := range keys {
			kn, err := yamlNode(k)
			if err != nil {
				return nil, err
			}
			vn, err := yamlNode(v.MapIndex(k))
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, kn, vn)
		}
		return n, nil
	}
	return scalarNode(v.Interface())
}

// scalarNode encodes a plain value, quoted where YAML needs it.
func scalarNode(v any) (*yaml.Node, error) {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		return nil, err
	}
	return &n, nil
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
