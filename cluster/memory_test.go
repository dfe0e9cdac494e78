package cluster

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/hookgate/hookgate/internal/gatewaytest"
)

// TestClaimMemory measures what claims cost a nats-server: RSS and disk
// per claim kept, for HOOKGATE_CLAIM_MEMORY claims (e.g. 100000) in a
// file-store bucket, one server as a subprocess (each replica of the
// bucket holds the same). Skipped unless the variable is set:
//
//	HOOKGATE_CLAIM_MEMORY=100000 go test -run TestClaimMemory -v ./cluster/
func TestClaimMemory(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("HOOKGATE_CLAIM_MEMORY"))
	if n <= 0 {
		t.Skip("set HOOKGATE_CLAIM_MEMORY to a number of claims to measure")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	port := gatewaytest.FreePort(t)
	store := filepath.Join(dir, "js")
	p, err := gatewaytest.Start("nats-server", []string{bin, "-js", "-sd", store, "-a", "127.0.0.1", "-p", strconv.Itoa(port)},
		gatewaytest.Options{DieWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(10 * time.Second) })
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	var nc *nats.Conn
	gatewaytest.WaitFor(t, "nats-server", 20*time.Second, func() (bool, string) {
		nc, err = nats.Connect(url)
		return err == nil, fmt.Sprint(err)
	})
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Gateway: "gateway-host-0123abcd", TTL: 30 * 24 * time.Hour, Remember: 1,
		JetStream: func() natsjs.JetStream { return js }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	settle := func() int64 {
		time.Sleep(5 * time.Second) // let the server drop its block caches
		rss, _, err := gatewaytest.Memory(p.Pid())
		if err != nil {
			t.Fatal(err)
		}
		return rss
	}
	before := settle()
	const workers = 32
	var wg sync.WaitGroup
	start := time.Now()
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if _, _, err := c.Claim(ctx, "stripe", fmt.Sprintf("evt_%024d", i), int64(i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	took := time.Since(start)
	after := settle()
	var disk int64
	_ = filepath.WalkDir(store, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				disk += info.Size()
			}
		}
		return nil
	})
	t.Logf("%d claims in %s (%.0f/s, %d workers); server RSS %d -> %d MiB: %d bytes per claim; store on disk %d MiB: %d bytes per claim",
		n, took.Round(time.Millisecond), float64(n)/took.Seconds(), workers, before>>20, after>>20,
		(after-before)/int64(n), disk>>20, disk/int64(n))
}
