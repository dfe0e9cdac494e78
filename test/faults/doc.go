// Package faults is hookgate's fault-injection suite: it runs the real
// gateway binary as a subprocess against a recording downstream and a
// provider simulator, injects faults (SIGKILL, SIGTERM, a failing
// downstream, a NATS outage, a wiped JetStream store, a full disk,
// concurrent duplicates) and checks after every scenario that nothing
// acknowledged was lost, nothing was delivered under two keys and nothing
// forged got through. The package has only tests; see README.md.
package faults
