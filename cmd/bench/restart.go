package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// The restart mode (-restart): load running on a fixed schedule, SIGKILL
// the server, start it again, and resume the load the moment /healthz
// answers; latency per second for the first seconds after that, for the
// gateway and, beside it, the durable floor.

// restartResult is one server's restart.
type restartResult struct {
	name      string
	before    result        // the load before the kill
	down      time.Duration // from the SIGKILL until /healthz answered again
	seconds   []secondStats // after /healthz answered, one per second
	after     result        // all of it
	cpu       cpuSplit      // during after
	walAtKill int64         // bytes of its WAL just after the SIGKILL (-1: none)
	startErr  string
}

// secondStats is one second of the load after the restart.
type secondStats struct {
	n, failed      int
	p50, p99, maxL time.Duration
	// The gateway's group commits in that second and their mean size
	// (from /metrics; commits -1 if not read), and the server's CPU in
	// cores (-1 if not read).
	commits   int
	meanBatch float64
	cpu       float64
	// The server's bytes written to storage (-1 if not read), and the
	// time some task on the machine waited for I/O (/proc/pressure/io).
	written int64
	ioWait  time.Duration
	// Events the downstream got in that second (-1: not counted).
	delivered int64
}

// bySecond splits the latencies of requests due in each second (at: due
// time since the load resumed, in ms) into secondStats; a request whose
// latency is failedLat failed.
func bySecond(at, lat []uint32, secs int) []secondStats {
	buckets := make([][]uint32, secs)
	failed := make([]int, secs)
	for i, a := range at {
		s := int(a / 1000)
		if s >= secs {
			continue
		}
		if lat[i] == failedLat {
			failed[s]++
			continue
		}
		buckets[s] = append(buckets[s], lat[i])
	}
	out := make([]secondStats, secs)
	for s, b := range buckets {
		slices.Sort(b)
		r := result{lat: b}
		out[s] = secondStats{n: len(b), failed: failed[s], p50: r.pct(50), p99: r.pct(99), maxL: r.pct(100), commits: -1, cpu: -1, written: -1, delivered: -1}
	}
	return out
}

// restartOnce runs one restart of a server: the load for o.restartBefore,
// SIGKILL, start again, /healthz, the load for o.restartAfter.
// walPath is the server's SQLite WAL, whose size at the kill is reported;
// delivered, if not nil, counts the events delivered, read each second.
func restartOnce(ctx context.Context, o *options, name, addr, tag string, start func() (*proc, error), p *proc,
	walPath string, delivered func() int64) (restartResult, *proc) {
	res := restartResult{name: name, walAtKill: -1}
	l := newLoader(addr, o.conns, o.size, o.repeat, tag)
	l.random = o.randomIDs
	loadCtx, cancel := context.WithCancel(ctx)
	done := make(chan result, 1)
	if o.restartBurst {
		logf("%s: %s closed loop (a burst), then SIGKILL", name, o.restartBefore)
		go func() { done <- l.closedLoop(loadCtx, 24*time.Hour) }()
	} else {
		logf("%s: %s at %.0f events/s, then SIGKILL", name, o.restartBefore, o.restartRate)
		go func() { done <- l.openLoop(loadCtx, 24*time.Hour, o.restartRate) }()
	}
	select {
	case <-time.After(o.restartBefore):
	case <-ctx.Done():
	}
	p.Kill()
	t0 := time.Now()
	if fi, err := os.Stat(walPath); err == nil {
		res.walAtKill = fi.Size()
	}
	cancel()
	res.before = <-done
	l.closeIdle()
	np, err := start()
	if err != nil {
		res.startErr = err.Error()
		return res, nil
	}
	if err := waitHealthz(ctx, np, addr, 5*time.Minute); err != nil {
		res.startErr = err.Error()
		return res, np
	}
	res.down = time.Since(t0)
	l.track = true
	m := measureCPU(np)
	stopWatch, watched := watchSeconds(ctx, np, addr, int(o.restartAfter/time.Second), delivered)
	res.after = l.openLoop(ctx, o.restartAfter, o.restartRate)
	res.cpu = m.done()
	stopWatch()
	res.seconds = bySecond(res.after.at, res.after.latAll, int(o.restartAfter/time.Second))
	for i, w := range *watched {
		if i < len(res.seconds) {
			res.seconds[i].commits, res.seconds[i].meanBatch, res.seconds[i].cpu = w.commits, w.meanBatch, w.cpu
			res.seconds[i].written, res.seconds[i].ioWait, res.seconds[i].delivered = w.written, w.ioWait, w.delivered
		}
	}
	logf("%s: /healthz again %s after the SIGKILL; first second p99 %s, whole %s p99 %s",
		name, res.down.Round(time.Millisecond), firstP99(res.seconds), o.restartAfter, res.after.pct(99))
	l.closeIdle()
	return res, np
}

// watchSeconds reads, each second, the server's group commits (from
// /metrics; -1 where it has none, as the floor) and CPU.
func watchSeconds(ctx context.Context, p *proc, addr string, secs int, delivered func() int64) (stop func(), out *[]secondStats) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	out = &[]secondStats{}
	go func() {
		defer close(done)
		prev, perr := scrapeHistogram(ctx, addr, "hookgate_store_commit_batch_size")
		cpu0, t0 := p.CPUTime(), time.Now()
		w0, io0 := writtenBytes(p.Pid()), ioPressure()
		var d0 int64
		if delivered != nil {
			d0 = delivered()
		}
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for range secs {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			x := secondStats{commits: -1}
			cur, err := scrapeHistogram(ctx, addr, "hookgate_store_commit_batch_size")
			if err == nil && perr == nil {
				d := cur.since(prev)
				x.commits = int(d.count)
				if d.count > 0 {
					x.meanBatch = d.sum / float64(d.count)
				}
			}
			prev, perr = cur, err
			cpu, now := p.CPUTime(), time.Now()
			x.cpu = (cpu - cpu0).Seconds() / now.Sub(t0).Seconds()
			cpu0, t0 = cpu, now
			w, io := writtenBytes(p.Pid()), ioPressure()
			x.written, x.ioWait = -1, io-io0
			if w >= 0 && w0 >= 0 {
				x.written = w - w0
			}
			w0, io0 = w, io
			x.delivered = -1
			if delivered != nil {
				d := delivered()
				x.delivered, d0 = d-d0, d
			}
			*out = append(*out, x)
		}
	}()
	return func() { cancel(); <-done }, out
}

func firstP99(s []secondStats) string {
	if len(s) == 0 {
		return "–"
	}
	return ms(s[0].p99)
}

// waitHealthz polls GET /healthz every 2 ms until it answers 200.
func waitHealthz(ctx context.Context, p *proc, addr string, timeout time.Duration) error {
	c := &fasthttp.Client{ReadTimeout: time.Second, WriteTimeout: time.Second, MaxIdleConnDuration: time.Millisecond}
	url := "http://" + addr + "/healthz"
	deadline := time.Now().Add(timeout)
	for {
		code, _, err := c.GetTimeout(nil, url, time.Second)
		if err == nil && code == fasthttp.StatusOK {
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("exited before /healthz answered:\n%s", p.Tail(15))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("/healthz not answered within %s", timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// writeRestart writes the restart table: per second after /healthz
// answered, the gateway beside the floor.
func writeRestart(b *strings.Builder, o *options, rs []restartResult) {
	if len(rs) == 0 {
		return
	}
	before := fmt.Sprintf("%.0f events/s for %s", o.restartRate, o.restartBefore)
	if o.restartBurst {
		before = fmt.Sprintf("a closed loop (a burst) for %s", o.restartBefore)
	}
	fmt.Fprintf(b, "\n### Restart under load (-restart): %s, SIGKILL, load resumed when /healthz answered: %.0f events/s offered on a fixed schedule (latency from when each request was due)\n\n",
		before, o.restartRate)
	b.WriteString("| | ")
	for _, r := range rs {
		b.WriteString(r.name + " | ")
	}
	b.WriteString("\n|---|")
	b.WriteString(strings.Repeat("---:|", len(rs)))
	b.WriteString("\n| before the kill: served/s; p99 | ")
	for _, r := range rs {
		fmt.Fprintf(b, "%s; %s | ", num(r.before.rate()), ms(r.before.pct(99)))
	}
	b.WriteString("\n| WAL at the kill | ")
	for _, r := range rs {
		if r.walAtKill < 0 {
			b.WriteString("– | ")
			continue
		}
		fmt.Fprintf(b, "%s | ", mb(r.walAtKill))
	}
	b.WriteString("\n| SIGKILL → /healthz answered | ")
	for _, r := range rs {
		if r.startErr != "" {
			fmt.Fprintf(b, "failed: %s | ", strings.ReplaceAll(r.startErr, "\n", " "))
			continue
		}
		fmt.Fprintf(b, "%s | ", r.down.Round(time.Millisecond))
	}
	b.WriteString("\n")
	secs := int(o.restartAfter / time.Second)
	for s := range secs {
		fmt.Fprintf(b, "| second %d after /healthz: n (failed); p50 / p99 / max; server cores; MB written; machine I/O wait; commits × mean batch; delivered | ", s+1)
		for _, r := range rs {
			if s >= len(r.seconds) {
				b.WriteString("– | ")
				continue
			}
			x := r.seconds[s]
			fmt.Fprintf(b, "%d (%d); %s / %s / %s", x.n, x.failed, ms(x.p50), ms(x.p99), ms(x.maxL))
			if x.cpu >= 0 {
				fmt.Fprintf(b, "; %.2f", x.cpu)
			}
			if x.written >= 0 {
				fmt.Fprintf(b, "; %.1f MB; %s", float64(x.written)/(1<<20), ms(x.ioWait))
			}
			if x.commits >= 0 {
				fmt.Fprintf(b, "; %d × %.0f", x.commits, x.meanBatch)
			}
			if x.delivered >= 0 {
				fmt.Fprintf(b, "; %d delivered", x.delivered)
			}
			b.WriteString(" | ")
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "| CPU after /healthz: server / bench / other processes / stolen; server CPU per event | ")
	for _, r := range rs {
		per := "–"
		if r.after.rate() > 0 {
			per = fmt.Sprintf("%.0f µs", r.cpu.server*1e6/r.after.rate())
		}
		fmt.Fprintf(b, "%s; %s | ", r.cpu, per)
	}
	b.WriteString("\n")
	fmt.Fprintf(b, "| all %s after /healthz: p50 / p99 / max; failed | ", o.restartAfter)
	for _, r := range rs {
		fmt.Fprintf(b, "%s / %s / %s; %d | ", ms(r.after.pct(50)), ms(r.after.pct(99)), ms(r.after.pct(100)), r.after.failed)
	}
	b.WriteString("\n")
}

// restartFloor is the durable floor's restart, on a store of its own.
func (r *report) restartFloor(ctx context.Context, self, dir, tag string) restartResult {
	o := r.o
	floorDir := filepath.Join(dir, "floor-restart")
	addr, err := freeAddr()
	if err == nil {
		err = os.MkdirAll(floorDir, 0o750)
	}
	if err != nil {
		return restartResult{name: "durable floor", startErr: err.Error()}
	}
	start := func() (*proc, error) {
		return startProc("durable floor", filepath.Join(dir, "floor-restart.log"), self, "-floor-dir", floorDir, "-floor", addr)
	}
	p, err := start()
	if err == nil {
		err = waitHealthz(ctx, p, addr, 30*time.Second)
	}
	if err != nil {
		return restartResult{name: "durable floor", startErr: err.Error()}
	}
	res, p := restartOnce(ctx, o, "durable floor", addr, tag, start, p, filepath.Join(floorDir, "floor.db-wal"), nil)
	if p != nil {
		if err := p.Stop(10 * time.Second); err != nil {
			logf("durable floor: %v", err)
		}
	}
	return res
}

// restartMarkdown is the report of a -restart run.
func (r *report) restartMarkdown() string {
	var b strings.Builder
	r.writeSetup(&b)
	b.WriteString("| metric | result |\n|---|---:|\n")
	if r.bare.rate() > 0 {
		fmt.Fprintf(&b, "| bare Fiber handler, closed loop (%s) | %s req/s |\n", r.o.bareDuration, num(r.bare.rate()))
	}
	if r.floor.rate() > 0 {
		fmt.Fprintf(&b, "| durable floor, closed loop (%s): events/s; p50 / p99 / max | %s; %s / %s / %s |\n", r.o.bareDuration,
			num(r.floor.rate()), ms(r.floor.pct(50)), ms(r.floor.pct(99)), ms(r.floor.pct(100)))
	}
	if r.o.prefill > 0 {
		fmt.Fprintf(&b, "| gateway start-up on the pre-filled store (before the load): HTTP; first event through | %s; %s |\n",
			r.startup.Round(time.Millisecond), r.firstDelivery.Round(time.Millisecond))
	}
	writeRestart(&b, r.o, r.restarts)
	if r.o.prefill > 0 {
		b.WriteString("\nThe durable floor's store is not pre-filled: it restarts on what the load before the kill stored.\n")
	}
	return b.String()
}

// writtenBytes is what the process has written to storage (write_bytes of
// /proc/<pid>/io), or -1.
func writtenBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// ioPressure is the machine's total time some task waited for I/O
// (/proc/pressure/io, "some"), 0 if unknown.
func ioPressure() time.Duration {
	b, err := os.ReadFile("/proc/pressure/io")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "total="); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return time.Duration(n) * time.Microsecond
		}
	}
	return 0
}
