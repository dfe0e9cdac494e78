package config

import (
	"os"
	"strings"
	"testing"
)

// dockerEnv is what the image's config needs from the environment.
var dockerEnv = map[string]string{
	"STRIPE_WEBHOOK_SECRET": "whsec_from_the_environment_0123",
	"HOOKGATE_API_TOKEN":    "api-token-from-env-0123456789",
}

// The image's config (docker/config.yaml) listens on 0.0.0.0, so it holds
// no secret: each comes from the environment, and without one the gateway
// refuses to start, naming the variable.
func TestDockerConfig(t *testing.T) {
	data, err := os.ReadFile("../docker/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name := range dockerEnv {
		if !strings.Contains(string(data), "${"+name+"}") {
			t.Errorf("docker/config.yaml does not use ${%s}", name)
		}
	}
	c, err := Parse(data, env(dockerEnv))
	if err != nil {
		t.Fatalf("with the environment set: %v", err)
	}
	if c.Listen != "0.0.0.0:8080" || c.DataDir != "/data" || c.Sources[0].Secrets[0].Reveal() != dockerEnv["STRIPE_WEBHOOK_SECRET"] ||
		c.API.Tokens[0].Reveal() != dockerEnv["HOOKGATE_API_TOKEN"] {
		t.Errorf("config = %+v", c)
	}
	// Every literal secret-looking value would be baked into the image.
	for _, s := range []string{"whsec_", "demo"} {
		if strings.Contains(string(data), s) {
			t.Errorf("docker/config.yaml contains %q", s)
		}
	}
	for name := range dockerEnv {
		without := map[string]string{}
		for k, v := range dockerEnv {
			if k != name {
				without[k] = v
			}
		}
		_, err := Parse(data, env(without))
		if err == nil || !strings.Contains(err.Error(), "environment variable "+name+" is not set") {
			t.Errorf("without %s: %v", name, err)
		}
	}
	// Set but empty is refused too.
	empty := map[string]string{}
	for k := range dockerEnv {
		empty[k] = ""
	}
	if _, err := Parse(data, env(empty)); err == nil {
		t.Error("empty variables accepted")
	} else {
		for _, key := range []string{"sources[0].secrets[0]", "api.tokens[0]"} {
			if !strings.Contains(err.Error(), key) {
				t.Errorf("empty variables: %v; want a line naming %s", err, key)
			}
		}
	}
}
