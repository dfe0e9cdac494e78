package app

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hookgate/hookgate/config"
)

// Two gateways whose store.path are two symlinks to one SQLite file are
// one store: the second is refused.
func TestStorePathSymlinkLocked(t *testing.T) {
	dir := t.TempDir()
	shared := filepath.Join(dir, "shared.db")
	if err := os.WriteFile(shared, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFor := func(name string) *config.Config {
		cfg := &config.Config{DataDir: filepath.Join(dir, name)}
		if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
			t.Fatal(err)
		}
		cfg.Store.Path = filepath.Join(cfg.DataDir, "hookgate.db")
		if err := os.Symlink(shared, cfg.Store.Path); err != nil {
			t.Fatal(err)
		}
		cfg.NATS.URL = "nats://127.0.0.1:4222" // no embedded store dir
		return cfg
	}
	release, err := Lock(cfgFor("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	release2, err := Lock(cfgFor("b"))
	var inUse *InUseError
	if !errors.As(err, &inUse) || inUse.Key != "store.path" {
		if release2 != nil {
			release2()
		}
		t.Fatalf("a second gateway on the same SQLite file through another symlink: %v, want store.path in use", err)
	}
}
