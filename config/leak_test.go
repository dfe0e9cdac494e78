package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// No way of printing a Config shows a secret: fmt's verbs, encoding/json,
// YAML and slog's handlers all see the masked values.
func TestConfigPrintsNoSecret(t *testing.T) {
	c := maskTestConfig(t)
	// Untyped constants: assignable whatever the fields' types.
	c.Tasks.Secret = "whsec_tasks_0123456789abcdef"
	c.Metrics.Token = "metricstoken_0123456789"
	secrets := append([]string{"whsec_tasks_0123456789abcdef", "metricstoken_0123456789"}, maskTestSecrets...)

	outputs := map[string]string{}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		outputs["fmt "+verb] = fmt.Sprintf(verb, c)
		outputs["fmt "+verb+" value"] = fmt.Sprintf(verb, *c)
		outputs["fmt "+verb+" route"] = fmt.Sprintf(verb, c.Routes[0])
		outputs["fmt "+verb+" secret"] = fmt.Sprintf(verb, c.Routes[0].Secret)
		outputs["fmt "+verb+" url"] = fmt.Sprintf(verb, c.Routes[0].URL)
		outputs["fmt "+verb+" headers"] = fmt.Sprintf(verb, c.Routes[0].Headers)
	}
	outputs["fmt Sprint"] = fmt.Sprint(c, c.Sources, c.API, c.Tasks, c.NATS)
	outputs["fmt Sprintln"] = fmt.Sprintln(*c)

	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	outputs["json"] = string(js)
	ys, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	outputs["yaml"] = string(ys)

	for name, h := range map[string]func(*bytes.Buffer) slog.Handler{
		"text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		"json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		var b bytes.Buffer
		log := slog.New(h(&b))
		log.Info("config", "config", c, "value", *c, "route", c.Routes[0], "sources", c.Sources,
			"secret", c.Routes[0].Secret, "secrets", c.Sources[0].Secrets, "url", c.Routes[0].URL,
			"nats", c.NATS.URL, "headers", c.Routes[0].Headers, "token", c.Metrics.Token,
			slog.Group("g", "tokens", c.API.Tokens, "tasks", c.Tasks))
		outputs["slog "+name] = b.String()
	}

	for name, out := range outputs {
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("%s shows the secret %q:\n%s", name, s, out)
			}
		}
	}
	// The masked values are there, in place of the secrets.
	for _, name := range []string{"fmt %v", "fmt %+v", "json", "yaml", "slog text", "slog json"} {
		if !strings.Contains(outputs[name], "whsec_…(38 chars)") {
			t.Errorf("%s lacks the masked route secret:\n%s", name, outputs[name])
		}
	}
}
